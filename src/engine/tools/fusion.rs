//! The rankings by words and by meaning made one, by their scores: each ranking's scores are
//! scaled to 0..1 over its own top (its best 1, its last 0) and the two are added, words
//! weighted [`TEXT_SHARE`], meaning the rest.
//!
//! The notes fuse by rank (reciprocal rank fusion, `semantic::fuse`); tools fuse by score
//! because a tool's BM25 and cosine say how sure they are: a name matched word for word
//! should win by more than one place. On the retrieval set (BENCHMARKS.md, `tools`) this moved
//! hybrid recall@5 from 0.829 to 0.845 with everything else unchanged.

use crate::engine::semantic;

/// A tool: (segment, tool in it).
pub type Key = (usize, usize);

/// The share of the fused score the words carry. 0.45 to 0.65 were tried on the retrieval
/// set: 0.55 is best, 0.5 and 0.6 within a task or two.
pub const TEXT_SHARE: f64 = 0.55;

/// The tools of both rankings (each best first, with its score), best first, each with its
/// fused score and its place in each ranking (from 1).
pub fn fuse(
    by_text: &[(Key, f64)],
    by_meaning: &[(Key, f64)],
) -> Vec<(Key, f64, Vec<Option<usize>>)> {
    let part = |ranking, share: f64| -> Vec<(Key, f64)> {
        (scaled(ranking).into_iter())
            .map(|(key, s)| (key, share * s))
            .collect()
    };
    semantic::combine(&[
        part(by_text, TEXT_SHARE),
        part(by_meaning, 1.0 - TEXT_SHARE),
    ])
}

/// A ranking's scores scaled to 0..1: the best 1, the last 0 (all 1 when they are equal).
fn scaled(ranking: &[(Key, f64)]) -> Vec<(Key, f64)> {
    let (Some(best), Some(last)) = (ranking.first(), ranking.last()) else {
        return vec![];
    };
    let span = best.1 - last.1;
    ranking
        .iter()
        .map(|&(k, s)| {
            (
                k,
                if span > 1e-12 {
                    (s - last.1) / span
                } else {
                    1.0
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sure_first_by_words_beats_a_close_first_by_meaning() {
        // Words: tool a far ahead. Meaning: b barely ahead of a.
        let text = [((0, 0), 12.0), ((0, 1), 2.0), ((0, 2), 1.0)];
        let meaning = [((0, 1), 0.61), ((0, 0), 0.60), ((0, 2), 0.2)];
        let fused = fuse(&text, &meaning);
        assert_eq!(fused[0].0, (0, 0));
        assert_eq!(fused[0].2, [Some(1), Some(2)]);
        assert_eq!(fused[1].0, (0, 1));
        assert_eq!(fused.len(), 3);
    }

    #[test]
    fn a_lone_hit_scores_and_a_missing_ranking_counts_nothing() {
        let fused = fuse(&[((1, 4), 3.0)], &[]);
        assert_eq!(fused.len(), 1);
        assert!((fused[0].1 - TEXT_SHARE).abs() < 1e-9, "{}", fused[0].1);
        assert_eq!(fused[0].2, [Some(1), None]);
        assert!(fuse(&[], &[]).is_empty());
    }
}
