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

#[cfg(test)]
mod tests {
    use super::words;

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
}
