//! The words of a tool and of a query, as the full-text ranking compares them: split at
//! anything that is not a letter or a digit and at camelCase humps (`listIssues`,
//! `get_file-contents`), lower-cased, common English endings trimmed (`issues` and `issue`
//! meet, `created` and `create`), and the words that say nothing dropped.

/// Words too common to rank by.
const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "for", "from", "have", "how",
    "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "please",
    "should", "so", "that", "the", "their", "them", "then", "there", "these", "this", "to", "up",
    "us", "was", "we", "what", "when", "which", "who", "will", "with", "you", "your",
];

/// The words of `text`, in order.
pub fn words(text: &str) -> Vec<String> {
    forms(text).into_iter().map(|(_, w)| w).collect()
}

/// The words of `text`, in order, each as written (lower-cased) and as compared.
pub fn forms(text: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    let mut cur = String::new();
    let mut prev: Option<char> = None;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            flush(&mut cur, &mut out);
            prev = None;
            continue;
        }
        // A hump: `listIssues` → list, issues; `HTTPServer` → http, server.
        if let Some(p) = prev {
            let hump = (p.is_lowercase() || p.is_ascii_digit()) && c.is_uppercase();
            if hump {
                flush(&mut cur, &mut out);
            }
        }
        cur.extend(c.to_lowercase());
        prev = Some(c);
    }
    flush(&mut cur, &mut out);
    out
}

fn flush(cur: &mut String, out: &mut Vec<(String, String)>) {
    if cur.is_empty() {
        return;
    }
    let w = std::mem::take(cur);
    if !STOP.contains(&w.as_str()) {
        let s = stem(&w);
        out.push((w, s));
    }
}

/// A word with its common English ending trimmed, so forms of one word meet (`issues` and
/// `issue`, `created` and `create`, `branches` and `branch`).
fn stem(w: &str) -> String {
    if w.len() <= 3 || !w.is_ascii() {
        return w.to_string();
    }
    let long = |s: &str| s.len() >= 3;
    let mut s = if let Some(s) = w.strip_suffix("ies").filter(|s| long(s)) {
        format!("{s}y")
    } else if let Some(s) = w.strip_suffix("sses") {
        format!("{s}ss")
    } else if let Some(s) = w
        .strip_suffix("es")
        .filter(|s| ["x", "z", "ch", "sh"].iter().any(|e| s.ends_with(e)))
    {
        s.to_string()
    } else if let Some(s) = w
        .strip_suffix('s')
        .filter(|s| !["s", "u", "i"].iter().any(|e| s.ends_with(e)))
    {
        s.to_string()
    } else if let Some(s) = w.strip_suffix("ing").filter(|s| long(s)) {
        s.to_string()
    } else if let Some(s) = w.strip_suffix("ed").filter(|s| long(s)) {
        s.to_string()
    } else {
        w.to_string()
    };
    if s.len() > 4 && s.ends_with('e') {
        s.pop();
    }
    s
}

/// A query with its arguments replaced by what they are, as a tool's description names them:
/// a URL by `url`, a path by `path` (`file path` when it ends in a file's name), a file's name
/// by `file`, a latitude and longitude (`27.98,86.92`) by `latitude longitude`. An agent's
/// request carries the values it wants used (`/home/dana/web`, `package.json`); their words
/// (`home`, `dana`, `json`) match nothing or the wrong tools, while what they are is what a
/// tool's description says it takes.
pub fn typed(query: &str) -> String {
    let mut out = String::with_capacity(query.len());
    for token in query.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(kind(token).unwrap_or(token));
    }
    out
}

/// What a token of a query is, if it is an argument of a kind tools name.
fn kind(token: &str) -> Option<&'static str> {
    let t = token.trim_matches(|c: char| "`'\"()[]{}<>,;:!?".contains(c));
    let t = t.strip_suffix('.').unwrap_or(t);
    let lower = t.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Some("url");
    }
    if let Some((a, b)) = t.split_once(',')
        && decimal(a)
        && decimal(b)
    {
        return Some("latitude longitude");
    }
    let rooted = ["/", "~/", "./", "../"].iter().any(|r| t.starts_with(r)) && t.len() > 2;
    let parts = t.contains('/') && t.split('/').all(|p| !p.is_empty());
    if rooted || parts && file_name(t) {
        return Some(if file_name(t) { "file path" } else { "path" });
    }
    if !t.contains('/') && file_name(t) {
        return Some("file");
    }
    None
}

/// Whether the last part of a path is a file's name: a name and an extension of one to five
/// letters or digits, not all digits (`cv.pdf`, `.eslintrc.json`; not `1.76` or `e.g`).
fn file_name(path: &str) -> bool {
    let last = path.rsplit('/').next().unwrap_or(path);
    let Some((stem, ext)) = last.rsplit_once('.') else {
        return false;
    };
    let stem = stem.trim_start_matches('.');
    !stem.is_empty()
        && (1..=5).contains(&ext.len())
        && ext.chars().all(|c| c.is_ascii_alphanumeric())
        && ext.chars().any(|c| c.is_ascii_alphabetic())
        && !(stem.len() == 1 && ext.len() == 1)
}

/// A number with a decimal point (`27.9881`, `-118.2923`).
fn decimal(s: &str) -> bool {
    let s = s.strip_prefix('-').unwrap_or(s);
    s.split_once('.').is_some_and(|(i, f)| {
        !i.is_empty()
            && !f.is_empty()
            && i.chars().all(|c| c.is_ascii_digit())
            && f.chars().all(|c| c.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::{typed, words};

    #[test]
    fn names_split_at_underscores_dashes_and_humps() {
        assert_eq!(words("list_issues"), words("list issue"));
        assert_eq!(words("get-file-contents"), ["get", "file", "content"]);
        assert_eq!(words("searchRepositories"), ["search", "repository"]);
        assert_eq!(words("HTTPServer v2Beta"), ["httpserver", "v2", "beta"]);
    }

    #[test]
    fn forms_of_one_word_meet_and_small_words_go() {
        assert_eq!(words("Create an issue"), words("created issues"));
        assert_eq!(words("updating messages"), words("updates message"));
        assert_eq!(words("the branches of a repo"), ["branch", "repo"]);
        assert_eq!(words("addresses status"), ["address", "status"]);
        assert!(words("to of the a").is_empty());
    }

    #[test]
    fn a_querys_arguments_read_as_what_they_are() {
        assert_eq!(
            typed("Open package.json and .eslintrc.json in /home/dana/web"),
            "Open file and file in path"
        );
        assert_eq!(typed("Stage src/cart.ts now"), "Stage file path now");
        assert_eq!(typed("cat ~/notes/todo.md."), "cat file path");
        assert_eq!(
            typed("Grab https://blog.rust-lang.org/x.html as text"),
            "Grab url as text"
        );
        assert_eq!(
            typed("points: 27.9881,86.9250 and 36.5785,-118.2923?"),
            "points: latitude longitude and latitude longitude"
        );
        // Not arguments: a repository, a version, a ratio, a word with a slash.
        for plain in ["acme/infra", "Rust 1.76", "e.g. this", "and/or", "3.5,2"] {
            assert_eq!(typed(plain), plain);
        }
    }
}
