//! Caps with eviction, written once: a map that must stay under its cap lets its oldest entries
//! go first, "oldest" being what each map says (made, last used, due).
//!
//! Its users: OAuth codes and requests, pending connects, MCP sessions, remote agent sessions,
//! calls waiting for input and task inboxes.

use std::collections::HashMap;
use std::hash::Hash;

/// Removes from `map` the entries that `age` ranks (`None`: never removed here), least first,
/// until at most `keep` ranked entries remain; answers the removed ones, least first (their
/// owner may have to cancel them).
pub(crate) fn evict_oldest<K: Eq + Hash + Clone, V, A: Ord>(
    map: &mut HashMap<K, V>,
    keep: usize,
    age: impl Fn(&K, &V) -> Option<A>,
) -> Vec<(K, V)> {
    let mut ranked: Vec<(A, K)> = map
        .iter()
        .filter_map(|(k, v)| age(k, v).map(|a| (a, k.clone())))
        .collect();
    if ranked.len() <= keep {
        return vec![];
    }
    ranked.sort_by(|a, b| a.0.cmp(&b.0));
    let over = ranked.len() - keep;
    ranked
        .into_iter()
        .take(over)
        .filter_map(|(_, k)| map.remove_entry(&k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::evict_oldest;
    use std::collections::HashMap;

    #[test]
    fn the_oldest_ranked_entries_go_first_until_the_cap_holds() {
        let mut m: HashMap<&str, u32> = [("a", 3), ("b", 1), ("c", 2), ("pinned", 0)].into();
        // "pinned" is never ranked: it stays, and does not count.
        let gone = evict_oldest(&mut m, 1, |k, v| (*k != "pinned").then_some(*v));
        assert_eq!(gone, vec![("b", 1), ("c", 2)]);
        assert_eq!(m.len(), 2);
        assert!(m.contains_key("a") && m.contains_key("pinned"));
        // Under the cap: nothing goes.
        assert!(evict_oldest(&mut m, 5, |_, v| Some(*v)).is_empty());
    }
}
