//! The README's "Connect an agent" section, run as written: its app-token command, the Claude
//! Code line (with a stand-in `claude` that hands over what it was given, which the test then
//! connects with), the desktop clients' configuration (`datanotes mcp` over stdio, spoken to by
//! rmcp) and the search listing's address. `~` is a temporary home holding the database `notes`,
//! and the default address is the test server's.

use super::bash_with;
use crate::kit::Server;
use crate::kit::mcp::{Agent, runtime};
use crate::kit::process::bin;
use rmcp::ServiceExt;
use std::path::Path;
use std::process::Stdio;

/// The README's section on connecting an agent.
fn section() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let start = readme
        .find("## Connect an agent")
        .expect("the README has a section Connect an agent");
    let rest = &readme[start + 3..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
}

/// The inline code span that starts with `prefix`, its line breaks made spaces.
fn code_span(text: &str, prefix: &str) -> String {
    let at = text
        .find(&format!("`{prefix}"))
        .unwrap_or_else(|| panic!("no `{prefix}...` in: {text}"));
    let rest = &text[at + 1..];
    rest[..rest.find('`').unwrap()]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The fenced block of `lang` that holds `needle`.
fn block<'a>(text: &'a str, lang: &str, needle: &str) -> &'a str {
    text.split(&format!("```{lang}\n"))
        .skip(1)
        .map(|b| &b[..b.find("```").unwrap()])
        .find(|b| b.contains(needle))
        .unwrap_or_else(|| panic!("no {lang} block with {needle:?} in: {text}"))
}

#[test]
fn the_readmes_agent_connections_work_as_written() {
    let doc = section();
    let home = tempfile::tempdir().unwrap();
    let s = Server::start_in(&home.path().join("notes"));
    let env = [("HOME", home.path())];
    let default = "http://127.0.0.1:5234";

    // The app token: printed once, and an agent connects with it and may write.
    let create = code_span(&doc, "datanotes apps create");
    let out = bash_with(home.path(), &s, &create, None, &env);
    let token = out
        .split_whitespace()
        .find(|w| w.starts_with("dn_"))
        .unwrap_or_else(|| panic!("no token printed by {create}: {out}"));
    let names = Agent::connect(&format!("{}/mcp", s.url), Some(token), None).names();
    assert!(
        names.iter().any(|n| n == "insert_row"),
        "the token made by `{create}` cannot write: {names:?}"
    );

    // Claude Code's line: a stand-in `claude` prints its arguments, one a line; the address and
    // header it was given open a session.
    let line = block(&doc, "sh", "claude mcp add");
    let stand_in = format!("claude() {{ printf '%s\\n' \"$@\"; }}\n{line}");
    let out = bash_with(home.path(), &s, &stand_in, None, &env);
    let args: Vec<&str> = out.lines().collect();
    let [
        "mcp",
        "add",
        "--transport",
        "http",
        _name,
        url,
        "--header",
        header,
    ] = args[..]
    else {
        panic!(
            "the Claude Code line no longer reads `claude mcp add --transport http NAME URL --header H`: {args:?}"
        );
    };
    assert!(url.starts_with(default), "{url}");
    let url = url.replace(default, &s.url);
    let bearer = header
        .strip_prefix("Authorization: Bearer ")
        .unwrap_or_else(|| panic!("not a bearer header: {header}"));
    assert_eq!(bearer, s.token, "the line's token is not the owner's");
    let want = Agent::connect(&url, Some(bearer), None).names();
    assert!(want.iter().any(|n| n == "select_rows"), "{want:?}");

    // The desktop clients' configuration: its command, run as the client would, serves the same
    // tools over stdio.
    let config: serde_json::Value =
        serde_json::from_str(block(&doc, "json", "mcpServers")).unwrap();
    let server = &config["mcpServers"]["datanotes"];
    assert_eq!(server["command"], "datanotes", "{config}");
    let folder = home.path().join("notes");
    let args: Vec<String> = server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace("/home/me/notes", folder.to_str().unwrap())
        })
        .collect();
    let rt = runtime();
    let over_stdio = rt.block_on(async {
        let mut child = tokio::process::Command::new(bin())
            .args(&args)
            .env("DATANOTES_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start datanotes mcp");
        let io = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
        let client = ().serve(io).await.expect("the stdio handshake");
        let tools = client.list_all_tools().await.unwrap();
        client.cancel().await.unwrap();
        tools.iter().map(|t| t.name.to_string()).collect::<Vec<_>>()
    });
    assert_eq!(over_stdio, want, "`datanotes {}`", args.join(" "));

    // The search listing: the address the README gives lists the two tools it names.
    let path = code_span(&doc, "/mcp?");
    let at = doc
        .find("lists two tools, ")
        .expect("the README names the search listing's tools");
    let mut named: Vec<&str> = doc[at..].split('`').skip(1).step_by(2).take(2).collect();
    let mut listed = Agent::connect(&format!("{}{path}", s.url), Some(&s.token), None).names();
    named.sort();
    listed.sort();
    assert_eq!(listed, named, "{path}");
}
