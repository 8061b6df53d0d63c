//! The vault's notes as agent skills (`skills: true` on a table), through the real server and
//! rmcp's client: `skill://index` and `skill://<name>/SKILL.md` listed, read and followed; a
//! hand edit of the note is the skill's edit; `search_tools` finds skills; a skill name that
//! breaks the Agent Skills rule is refused naming the column; a grant that may not read the
//! table sees none of it.

use crate::kit::mcp::{ask, connect_on};
use crate::kit::*;
use serde_json::{Value, json};

const SKILLS: &str = "work.team.skills";

fn skills_table(s: &Server) {
    // Without a unique name column: refused, naming the column and what it needs.
    let e = s.refused(
        "create_table",
        json!({"table": SKILLS, "skills": true, "columns": {
            "name": {"type": "text", "required": true},
            "description": {"type": "text", "required": true}}}),
        400,
    );
    assert_eq!(
        (e["column"].as_str(), e["rule"].as_str()),
        (Some("name"), Some("skills")),
        "{e}"
    );
    assert!(e["hint"].as_str().unwrap().contains("unique"), "{e}");
    s.ok(
        "create_table",
        json!({"table": SKILLS, "skills": true, "description": "How we work", "columns": {
            "name": {"type": "text", "required": true, "unique": true},
            "description": {"type": "text", "required": true},
            "license": {"type": "text"}}}),
    );
    s.ok(
        "insert_row",
        json!({"table": SKILLS, "id": "weekly", "values": {
            "name": "weekly-review",
            "description": "Review the week: close finished tasks, plan the next week's three priorities."},
            "body": "# Weekly review\n\n1. List the tasks done this week.\n"}),
    );
}

#[test]
fn notes_of_a_skills_table_are_skills_listed_read_followed_and_found() {
    let s = Server::start();
    skills_table(&s);
    // A name that is not an Agent Skills name: refused, naming the column; nothing written.
    let e = s.refused_nochange(
        "insert_row",
        json!({"table": SKILLS, "id": "bad", "values": {"name": "Weekly Review", "description": "x"}}),
        422,
    );
    assert_eq!(
        (e["column"].as_str(), e["rule"].as_str()),
        (Some("name"), Some("skill_name")),
        "{e}"
    );
    assert_eq!(
        s.ok("describe_table", json!({"table": SKILLS}))["skills"],
        true
    );

    let rt = runtime();
    let (c, u) = super::resources::connect(&rt, &s, &s.token);

    // Listed first: the index, then each skill, with its description.
    let page = ask(&rt, &c, "resources/list", json!({}));
    let list = page["resources"].as_array().unwrap();
    assert_eq!(list[0]["uri"], "skill://index", "{page}");
    let skill = &list[1];
    assert_eq!(skill["uri"], "skill://weekly-review/SKILL.md", "{page}");
    assert_eq!(skill["name"], "weekly-review");
    assert_eq!(skill["mimeType"], "text/markdown");
    assert!(
        skill["description"]
            .as_str()
            .unwrap()
            .starts_with("Review the week")
    );

    // The SKILL.md is the note's file: front matter with name and description (and the other
    // columns), then the body.
    let read = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "skill://weekly-review/SKILL.md"}),
    );
    let text = read["contents"][0]["text"].as_str().unwrap().to_string();
    assert!(
        text.starts_with("---\nname: weekly-review\ndescription: 'Review the week"),
        "{text}"
    );
    assert!(text.contains("---\n# Weekly review\n"), "{text}");
    assert_eq!(read["contents"][0]["uri"], "skill://weekly-review/SKILL.md");
    assert_eq!(
        text,
        std::fs::read_to_string(s.row_path(SKILLS, "weekly")).unwrap()
    );
    let index = ask(&rt, &c, "resources/read", json!({"uri": "skill://index"}));
    let idx: Value = serde_json::from_str(index["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        idx["skills"],
        json!([{"name": "weekly-review", "type": "skill-md",
                "description": "Review the week: close finished tasks, plan the next week's three priorities.",
                "url": "skill://weekly-review/SKILL.md"}])
    );
    let none = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "skill://no-such-skill/SKILL.md"}),
    );
    assert!(
        none.to_string().contains("no resource") || none.to_string().contains("no skill"),
        "{none}"
    );

    // Followed: a hand edit of the note updates the skill, and the subscriber is told.
    ask(
        &rt,
        &c,
        "resources/subscribe",
        json!({"uri": "skill://weekly-review/SKILL.md"}),
    );
    let edited = text.replace(
        "1. List the tasks done this week.",
        "1. List the tasks done.\n2. Plan three priorities.",
    );
    write_by_hand(&s.row_path(SKILLS, "weekly"), &edited);
    eventually("the subscriber is told the skill changed", || {
        u.0.lock()
            .unwrap()
            .iter()
            .any(|x| x == "skill://weekly-review/SKILL.md")
    });
    let read = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "skill://weekly-review/SKILL.md"}),
    );
    assert!(
        read["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("2. Plan three priorities.")
    );

    // Found by search_tools, as a skill to read.
    let found = s.ok(
        "search_tools",
        json!({"query": "plan my priorities for next week"}),
    );
    let hit = found["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "skill")
        .unwrap_or_else(|| panic!("no skill found: {found}"));
    assert_eq!(hit["name"], "weekly-review", "{found}");
    assert_eq!(hit["uri"], "skill://weekly-review/SKILL.md");
    assert!(
        found["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kind"] == "tool")
            .all(|t| t["app"].is_string())
    );
    let only = s.ok(
        "search_tools",
        json!({"query": "weekly review", "apps": ["@skills"]}),
    );
    assert!(
        only["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["kind"] == "skill"),
        "{only}"
    );

    // A grant that may not read the table: no skill listed, read or found.
    s.ok(
        "create_table",
        json!({"table": "work.crm.notes", "columns": {"title": {"type": "text"}}}),
    );
    let grant = oauth::connect(
        &s,
        "skill-less agent",
        json!({"call_tools": ["search_tools", "list_tables"], "read": ["work.crm.*"]}),
    );
    let g = connect_on(&rt, &format!("{}/mcp", s.url), Some(&grant.access), None);
    let page = ask(&rt, &g, "resources/list", json!({}));
    assert!(!page.to_string().contains("skill://"), "{page}");
    // What it may read, it sees.
    assert!(
        page.to_string()
            .contains("datanotes://tables/work.crm.notes"),
        "{page}"
    );
    let refused = ask(
        &rt,
        &g,
        "resources/read",
        json!({"uri": "skill://weekly-review/SKILL.md"}),
    );
    assert!(!refused.to_string().contains("Weekly review"), "{refused}");
    let r = ask(
        &rt,
        &g,
        "tools/call",
        json!({"name": "search_tools", "arguments": {"query": "weekly review"}}),
    );
    assert!(!r.to_string().contains("weekly-review"), "{r}");
    rt.block_on(async {
        let _ = c.cancel().await;
        let _ = g.cancel().await;
    });
}
