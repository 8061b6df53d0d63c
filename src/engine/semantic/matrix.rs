//! The vectors in memory: one int8 row per chunk (a scale each), the rows they belong to, and an
//! exact nearest-neighbour scan written so that the compiler vectorises it.
//!
//! A vector `v` (unit length) is kept as `q = round(v / s)` with `s = max|v| / 127`, a quarter
//! of its f32 size; a score is `s_query · s_chunk · Σ q_query·q_chunk`, within about 1 % of
//! the cosine. A row's score is its best chunk's.
//!
//! Each row's chunks are one run; runs left behind are reclaimed. The scan uses AVX2 where the
//! machine has it.

use std::collections::HashMap;
use std::sync::Arc;

/// Quantises a unit vector to int8 with one scale.
pub fn quantize(v: &[f32]) -> (Vec<i8>, f32) {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        return (vec![0; v.len()], 0.0);
    }
    let s = max / 127.0;
    (
        v.iter()
            .map(|x| (x / s).round().clamp(-127.0, 127.0) as i8)
            .collect(),
        s,
    )
}

/// Σ a·b over int8 vectors of the same length, in i32 lanes the compiler turns into SIMD.
#[inline(always)]
fn dot_generic(a: &[i8], b: &[i8]) -> i32 {
    const L: usize = 32;
    let mut acc = [0i32; L];
    let (ac, ar) = a.as_chunks::<L>();
    let (bc, br) = b.as_chunks::<L>();
    for (x, y) in ac.iter().zip(bc) {
        for i in 0..L {
            acc[i] += x[i] as i16 as i32 * y[i] as i16 as i32;
        }
    }
    let mut sum: i32 = acc.iter().sum();
    for (x, y) in ar.iter().zip(br) {
        sum += *x as i32 * *y as i32;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scan_avx2(codes: &[i8], dim: usize, q: &[i8], out: &mut [i32]) {
    for (c, o) in codes.chunks_exact(dim).zip(out.iter_mut()) {
        *o = dot_generic(c, q);
    }
}

fn scan_plain(codes: &[i8], dim: usize, q: &[i8], out: &mut [i32]) {
    for (c, o) in codes.chunks_exact(dim).zip(out.iter_mut()) {
        *o = dot_generic(c, q);
    }
}

/// The raw dot product of `q` with every chunk, into `out` (AVX2 where the processor has it).
fn scan(codes: &[i8], dim: usize, q: &[i8], out: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2 (checked just above).
        unsafe { scan_avx2(codes, dim, q, out) };
        return;
    }
    scan_plain(codes, dim, q, out)
}

/// A row the matrix holds vectors of.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its table (an index into [`Matrix::tables`]).
    pub table: u32,
    /// Its id.
    pub id: Arc<str>,
    /// The row's version the vectors were computed from.
    pub version: i64,
    /// The row file's hash when they were.
    pub hash: u64,
    /// Its chunks: `n` from `first` on, in order.
    first: u32,
    n: u32,
}

/// No row: a chunk left by a row that changed (reclaimed by [`Matrix::compact`]).
const FREE: u32 = u32::MAX;

/// The vectors of every indexed row: each row's chunks are a run of the matrix; a row put
/// again gets a new run at the end, and the runs it left are reclaimed once they are a fifth
/// of the matrix.
#[derive(Debug, Default)]
pub struct Matrix {
    dim: usize,
    codes: Vec<i8>,
    scales: Vec<f32>,
    /// The row slot of each chunk, or [`FREE`].
    owner: Vec<u32>,
    /// Chunks left free.
    garbage: usize,
    rows: Vec<Option<Entry>>,
    free_rows: Vec<u32>,
    by_key: HashMap<(u32, Arc<str>), u32>,
    /// The tables' names, by index.
    pub tables: Vec<Arc<str>>,
    table_ix: HashMap<Arc<str>, u32>,
}

/// A scored row of a scan.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The row's slot.
    pub slot: u32,
    /// Its best chunk's score.
    pub score: f32,
    /// Its best chunk (0 = first).
    pub chunk: usize,
}

impl Matrix {
    /// An empty matrix of `dim` dimensions.
    pub fn new(dim: usize) -> Matrix {
        Matrix {
            dim,
            ..Default::default()
        }
    }

    /// The number of rows and of chunks held.
    pub fn counts(&self) -> (usize, usize) {
        (self.by_key.len(), self.owner.len() - self.garbage)
    }

    /// Bytes held: the vectors and their bookkeeping, the rows and their ids, the map of keys.
    pub fn bytes(&self) -> usize {
        let key = std::mem::size_of::<((u32, Arc<str>), u32)>() + 1;
        self.codes.capacity()
            + self.scales.capacity() * 4
            + self.owner.capacity() * 4
            + self.rows.capacity() * std::mem::size_of::<Option<Entry>>()
            + self.free_rows.capacity() * 4
            + self
                .rows
                .iter()
                .flatten()
                .map(|e| (16 + e.id.len()).next_multiple_of(16))
                .sum::<usize>()
            + self.by_key.capacity() * 8 / 7 * key
    }

    /// Gives back what the vectors' arrays hold beyond their length (after a load or a build).
    pub fn shrink(&mut self) {
        self.codes.shrink_to_fit();
        self.scales.shrink_to_fit();
        self.owner.shrink_to_fit();
        self.rows.shrink_to_fit();
        self.by_key.shrink_to_fit();
    }

    fn table_index(&mut self, table: &str) -> u32 {
        if let Some(&i) = self.table_ix.get(table) {
            return i;
        }
        let name: Arc<str> = table.into();
        let i = self.tables.len() as u32;
        self.tables.push(name.clone());
        self.table_ix.insert(name, i);
        i
    }

    /// The table index of a name, if the matrix has seen it.
    pub fn table_of(&self, table: &str) -> Option<u32> {
        self.table_ix.get(table).copied()
    }

    /// The row in a slot.
    pub fn entry(&self, slot: u32) -> Option<&Entry> {
        self.rows.get(slot as usize).and_then(Option::as_ref)
    }

    /// The slot of a held row.
    pub fn slot(&self, table: &str, id: &str) -> Option<u32> {
        let t = self.table_of(table)?;
        self.by_key.get(&(t, Arc::from(id))).copied()
    }

    /// The row's entry, if held.
    pub fn get(&self, table: &str, id: &str) -> Option<&Entry> {
        self.entry(self.slot(table, id)?)
    }

    /// Every held row of a table: id → (version, hash).
    pub fn rows_of(&self, table: &str) -> HashMap<Arc<str>, (i64, u64)> {
        let Some(t) = self.table_of(table) else {
            return HashMap::new();
        };
        self.rows
            .iter()
            .flatten()
            .filter(|e| e.table == t)
            .map(|e| (e.id.clone(), (e.version, e.hash)))
            .collect()
    }

    /// The names of the tables with rows held.
    pub fn held_tables(&self) -> Vec<String> {
        let mut held: Vec<bool> = vec![false; self.tables.len()];
        for e in self.rows.iter().flatten() {
            held[e.table as usize] = true;
        }
        self.tables
            .iter()
            .zip(held)
            .filter(|(_, h)| *h)
            .map(|(t, _)| t.to_string())
            .collect()
    }

    /// Sets a row's vectors (`codes`: `dim` each; no chunk: a row with no text), replacing any
    /// it had.
    pub fn put(
        &mut self,
        table: &str,
        id: &str,
        version: i64,
        hash: u64,
        codes: &[i8],
        scales: &[f32],
    ) {
        assert_eq!(codes.len(), scales.len() * self.dim);
        self.remove(table, id);
        let t = self.table_index(table);
        let slot = match self.free_rows.pop() {
            Some(s) => s,
            None => {
                self.rows.push(None);
                (self.rows.len() - 1) as u32
            }
        };
        let first = self.owner.len() as u32;
        self.codes.extend_from_slice(codes);
        self.scales.extend_from_slice(scales);
        self.owner.extend(std::iter::repeat_n(slot, scales.len()));
        let id: Arc<str> = id.into();
        self.by_key.insert((t, id.clone()), slot);
        self.rows[slot as usize] = Some(Entry {
            table: t,
            id,
            version,
            hash,
            first,
            n: scales.len() as u32,
        });
    }

    /// Forgets a row's vectors.
    pub fn remove(&mut self, table: &str, id: &str) -> bool {
        let Some(t) = self.table_of(table) else {
            return false;
        };
        let Some(slot) = self.by_key.remove(&(t, Arc::from(id))) else {
            return false;
        };
        if let Some(e) = self.rows[slot as usize].take() {
            let run = e.first as usize..(e.first + e.n) as usize;
            self.owner[run.clone()].fill(FREE);
            self.scales[run].fill(0.0);
            self.garbage += e.n as usize;
        }
        self.free_rows.push(slot);
        if self.garbage > 1024 && self.garbage * 5 > self.owner.len() {
            self.compact();
        }
        true
    }

    /// Moves every held chunk down over the free ones, keeping each row's run in order.
    pub fn compact(&mut self) {
        let dim = self.dim;
        let mut to = 0usize;
        for from in 0..self.owner.len() {
            let slot = self.owner[from];
            if slot == FREE {
                continue;
            }
            if from != to {
                self.codes
                    .copy_within(from * dim..(from + 1) * dim, to * dim);
                self.scales[to] = self.scales[from];
                self.owner[to] = slot;
            }
            // A run moves as a whole: its first chunk says where it now starts.
            if let Some(e) = self.rows[slot as usize].as_mut()
                && e.first as usize == from
            {
                e.first = to as u32;
            }
            to += 1;
        }
        self.codes.truncate(to * dim);
        self.scales.truncate(to);
        self.owner.truncate(to);
        self.garbage = 0;
    }

    /// The `k` rows nearest to `q` (a quantised query and its scale), best first; only rows of
    /// the tables `allowed` says yes to (by table index), and never `except`.
    pub fn nearest(
        &self,
        q: &[i8],
        q_scale: f32,
        k: usize,
        allowed: &dyn Fn(u32) -> bool,
        except: Option<u32>,
    ) -> Vec<Scored> {
        if k == 0 || self.owner.is_empty() || q.len() != self.dim {
            return vec![];
        }
        let mut raw = vec![0i32; self.owner.len()];
        scan(&self.codes, self.dim, q, &mut raw);
        let table_ok: Vec<bool> = (0..self.tables.len() as u32).map(allowed).collect();
        // Each row's best chunk (a row's chunks are one run: a row ends where the owner
        // changes), the best `k` rows kept in a heap whose top is the worst of them.
        let mut best = TopK::new(k);
        let mut cur: Option<(u32, f32, u32)> = None;
        for (c, (&slot, &r)) in self.owner.iter().zip(&raw).enumerate() {
            if slot == FREE || Some(slot) == except {
                continue;
            }
            let s = r as f32 * self.scales[c] * q_scale;
            match &mut cur {
                Some(b) if b.0 == slot => {
                    if s > b.1 {
                        *b = (slot, s, c as u32);
                    }
                }
                _ => {
                    if let Some(b) = cur.take() {
                        best.offer(b);
                    }
                    let Some(e) = &self.rows[slot as usize] else {
                        continue;
                    };
                    if table_ok[e.table as usize] {
                        cur = Some((slot, s, c as u32));
                    }
                }
            }
        }
        if let Some(b) = cur {
            best.offer(b);
        }
        best.into_sorted()
            .into_iter()
            .map(|(slot, score, c)| {
                let first = self.rows[slot as usize].as_ref().map_or(c, |e| e.first);
                Scored {
                    slot,
                    score,
                    chunk: (c - first) as usize,
                }
            })
            .collect()
    }
}

/// A candidate: (slot, score, chunk), ordered so that the heap's top is the worst kept (lowest
/// score; among equal scores, the higher slot).
#[derive(PartialEq)]
struct Candidate((u32, f32, u32));

impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .0
            .1
            .total_cmp(&self.0.1)
            .then(self.0.0.cmp(&other.0.0))
    }
}

/// The `k` best candidates seen.
struct TopK {
    k: usize,
    heap: std::collections::BinaryHeap<Candidate>,
}

impl TopK {
    fn new(k: usize) -> TopK {
        TopK {
            k,
            heap: std::collections::BinaryHeap::with_capacity(k + 1),
        }
    }
    fn offer(&mut self, c: (u32, f32, u32)) {
        if self.heap.len() < self.k {
            self.heap.push(Candidate(c));
        } else if let Some(mut worst) = self.heap.peek_mut()
            && Candidate(c) < *worst
        {
            *worst = Candidate(c);
        }
    }
    /// Best first.
    fn into_sorted(self) -> Vec<(u32, f32, u32)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|c| c.0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn the_dot_product_is_exact_and_quantisation_close() {
        let a: Vec<i8> = (0..300).map(|i| (i % 255 - 127) as i8).collect();
        let b: Vec<i8> = (0..300).map(|i| ((i * 7) % 255 - 127) as i8).collect();
        let want: i32 = a.iter().zip(&b).map(|(x, y)| *x as i32 * *y as i32).sum();
        let mut out = [0i32; 1];
        scan(&a, 300, &b, &mut out);
        assert_eq!(out[0], want);
        assert_eq!(dot_generic(&a, &b), want);
        let v = unit(&[0.3, -0.2, 0.9, 0.1]);
        let w = unit(&[0.25, -0.1, 0.8, 0.3]);
        let cos: f32 = v.iter().zip(&w).map(|(x, y)| x * y).sum();
        let (qv, sv) = quantize(&v);
        let (qw, sw) = quantize(&w);
        let approx = dot_generic(&qv, &qw) as f32 * sv * sw;
        assert!((approx - cos).abs() < 0.01, "{approx} vs {cos}");
    }

    #[test]
    fn rows_are_replaced_removed_and_ranked_by_their_best_chunk() {
        let mut m = Matrix::new(4);
        let q = |v: &[f32]| quantize(&unit(v));
        let (a, sa) = q(&[1.0, 0.0, 0.0, 0.0]);
        let (b, sb) = q(&[0.0, 1.0, 0.0, 0.0]);
        let (c, sc) = q(&[0.7, 0.7, 0.0, 0.0]);
        m.put("t.s.x", "a", 1, 11, &a, &[sa]);
        // Two chunks: the second is the best.
        m.put(
            "t.s.x",
            "b",
            1,
            12,
            &[b.clone(), a.clone()].concat(),
            &[sb, sa],
        );
        m.put("t.s.y", "c", 1, 13, &c, &[sc]);
        let (qa, sqa) = q(&[1.0, 0.05, 0.0, 0.0]);
        let all = |_: u32| true;
        let hits = m.nearest(&qa, sqa, 10, &all, None);
        let ids: Vec<&str> = hits.iter().map(|h| &*m.entry(h.slot).unwrap().id).collect();
        assert_eq!(ids.len(), 3);
        assert_eq!(ids[2], "c");
        assert_eq!(
            hits.iter()
                .find(|h| &*m.entry(h.slot).unwrap().id == "b")
                .unwrap()
                .chunk,
            1
        );
        // A new version replaces the old vectors; chunks are reused.
        m.put("t.s.x", "b", 2, 14, &b, &[sb]);
        assert_eq!(m.counts(), (3, 3));
        assert_eq!(m.get("t.s.x", "b").unwrap().version, 2);
        let hits = m.nearest(&qa, sqa, 2, &all, None);
        assert_eq!(hits.len(), 2);
        assert_eq!(&*m.entry(hits[1].slot).unwrap().id, "c");
        // Only some tables; never the row itself.
        let y = m.table_of("t.s.y").unwrap();
        let only_y = |t: u32| t == y;
        assert_eq!(m.nearest(&qa, sqa, 10, &only_y, None).len(), 1);
        let slot_a = hits[0].slot;
        assert!(
            m.nearest(&qa, sqa, 10, &all, Some(slot_a))
                .iter()
                .all(|h| h.slot != slot_a)
        );
        assert!(m.remove("t.s.x", "a"));
        assert!(!m.remove("t.s.x", "a"));
        assert_eq!(m.counts(), (2, 2));
        assert_eq!(m.rows_of("t.s.x").len(), 1);
        // Compacted, the same rows answer the same.
        let before: Vec<(String, usize)> = m
            .nearest(&qa, sqa, 10, &all, None)
            .iter()
            .map(|h| (m.entry(h.slot).unwrap().id.to_string(), h.chunk))
            .collect();
        m.compact();
        assert_eq!(m.counts(), (2, 2));
        assert_eq!(m.owner.len(), 2);
        let after: Vec<(String, usize)> = m
            .nearest(&qa, sqa, 10, &all, None)
            .iter()
            .map(|h| (m.entry(h.slot).unwrap().id.to_string(), h.chunk))
            .collect();
        assert_eq!(before, after);
    }

    #[test]
    fn compaction_keeps_every_run_whole() {
        let mut m = Matrix::new(2);
        for i in 0..3000u32 {
            let n = 1 + (i % 3) as usize;
            let codes: Vec<i8> = (0..n * 2).map(|j| (i % 100) as i8 + j as i8).collect();
            m.put("a.b.c", &format!("r{i}"), 1, 0, &codes, &vec![1.0; n]);
        }
        // Removing a third of them crosses the threshold (a fifth free): compacted on the way.
        for i in (0..3000u32).step_by(3) {
            m.remove("a.b.c", &format!("r{i}"));
        }
        assert!(m.garbage * 5 <= m.owner.len() || m.garbage <= 1024);
        m.compact();
        for i in (1..3000u32).filter(|i| i % 3 != 0) {
            let e = m.get("a.b.c", &format!("r{i}")).unwrap();
            let n = 1 + (i % 3) as usize;
            assert_eq!(e.n as usize, n);
            let run = &m.codes[e.first as usize * 2..(e.first as usize + n) * 2];
            let want: Vec<i8> = (0..n * 2).map(|j| (i % 100) as i8 + j as i8).collect();
            assert_eq!(run, &want[..], "row r{i}");
            assert!(
                m.owner[e.first as usize..e.first as usize + n]
                    .iter()
                    .all(|&o| o == m.slot("a.b.c", &format!("r{i}")).unwrap())
            );
        }
    }
}
