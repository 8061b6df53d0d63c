//! How a token is listed the tools at `/mcp`: every tool it may call, or the search listing with
//! its pinned tools (an app's entry and a grant's consent say which).

use super::valid_tool_pattern;
use crate::error::{Error, Result};
use serde::Serialize;

/// What a token is listed on `/mcp` (set by the owner: an app's entry, a grant's consent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolListing {
    /// Every tool it may call (the default).
    #[default]
    All,
    /// The search listing: `search_tools`, `call_tool`, its pinned tools, and what its
    /// session's searches found (as `/mcp?tools=search`).
    Search,
}

impl ToolListing {
    /// The default: every tool.
    pub fn is_all(&self) -> bool {
        *self == ToolListing::All
    }
}

/// The most pinned tool patterns of a token.
pub const MAX_PINNED: usize = 32;

/// Checks a token's pinned tools: at most [`MAX_PINNED`] tool names or patterns.
pub fn check_pinned(patterns: &[String]) -> Result<()> {
    if let Some(p) = patterns.iter().find(|p| !valid_tool_pattern(p)) {
        return Err(Error::invalid(format!("invalid pinned tool pattern {p:?}"))
            .column("pinned_tools")
            .rule("pattern")
            .hint("each pinned_tools entry is a tool name or a pattern with *, e.g. \"select_rows\" or \"planning_*\""));
    }
    if patterns.len() > MAX_PINNED {
        return Err(Error::invalid(format!(
            "{} pinned tools: at most {MAX_PINNED}",
            patterns.len()
        ))
        .column("pinned_tools")
        .rule("limit")
        .hint("pin the few tools the agent uses at every turn; search_tools finds the rest"));
    }
    Ok(())
}
