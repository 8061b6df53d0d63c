//! The patterns of rights: table patterns (`catalog.schema.table`, `catalog.schema.*`,
//! `catalog.*`, `*`: what a token may write or read) and tool patterns (a name, `*` matching any
//! run of characters: what it may list and call, what is pinned).

/// Does a write pattern (`catalog.schema.table`, `catalog.schema.*`, `catalog.*`, `*`) cover a table?
pub fn pattern_matches(pattern: &str, table: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_suffix(".*") {
        Some(prefix) => table.starts_with(prefix) && table[prefix.len()..].starts_with('.'),
        None => pattern == table,
    }
}

/// Checks a write pattern's form.
pub fn valid_pattern(p: &str) -> bool {
    if p == "*" {
        return true;
    }
    let parts: Vec<&str> = p.split('.').collect();
    let names_ok = |ps: &[&str]| ps.iter().all(|x| crate::names::is_name(x));
    match parts.as_slice() {
        [a, b, c] if *c == "*" => names_ok(&[a, b]),
        [a, b] if *b == "*" => names_ok(&[a]),
        [_, _, _] => names_ok(&parts),
        _ => false,
    }
}

/// Does a tool pattern (a tool name, `*` matching any run of characters) cover a tool name?
pub fn tool_pattern_matches(pattern: &str, tool: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = tool.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the name itself.
        return rest.is_empty();
    };
    for p in middle {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Checks a tool pattern's form: 1 to 64 of `[A-Za-z0-9_-]` and `*`.
pub fn valid_tool_pattern(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 64
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(pattern_matches("*", "a.b.c"));
        assert!(pattern_matches("a.*", "a.b.c"));
        assert!(!pattern_matches("a.*", "ab.b.c"));
        assert!(pattern_matches("a.b.*", "a.b.c"));
        assert!(!pattern_matches("a.b.*", "a.bc.d"));
        assert!(pattern_matches("a.b.c", "a.b.c"));
        assert!(!pattern_matches("a.b.c", "a.b.cd"));
        assert!(
            valid_pattern("a.b.*")
                && valid_pattern("a.*")
                && valid_pattern("*")
                && valid_pattern("a.b.c")
        );
        assert!(
            !valid_pattern("a.*.c")
                && !valid_pattern("a")
                && !valid_pattern("A.b.c")
                && !valid_pattern("a.b.c.d")
        );
        for (p, t, want) in [
            ("*", "select_rows", true),
            ("planning_*", "planning_add_task", true),
            ("planning_*", "planning_", true),
            ("planning_*", "plan_add", false),
            ("select_rows", "select_rows", true),
            ("select_rows", "select_rows2", false),
            ("*_task", "planning_add_task", true),
            ("*_task", "planning_add_tasks", false),
            ("a*b*c", "a_x_b_y_c", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(tool_pattern_matches(p, t), want, "{p} {t}");
        }
        assert!(
            valid_tool_pattern("planning_*")
                && !valid_tool_pattern("a.b")
                && !valid_tool_pattern("")
        );
    }
}
