//! The vectors in memory: one int8 row per chunk (a scale each), the rows they belong to, and an
//! exact nearest-neighbour scan written so that the compiler vectorises it.
//!
//! A vector `v` (unit length) is kept as `q = round(v / s)` with `s = max|v| / 127`, a quarter
//! of its f32 size; a score is `s_query · s_chunk · Σ q_query·q_chunk`, within about 1 % of
//! the cosine. A row's score is its best chunk's.

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
    /// Its chunks, in order.
    chunks: Vec<u32>,
}

/// No row: a free chunk.
const FREE: u32 = u32::MAX;

/// The vectors of every indexed row.
#[derive(Debug, Default)]
pub struct Matrix {
    dim: usize,
    codes: Vec<i8>,
    scales: Vec<f32>,
    /// The row slot of each chunk, or [`FREE`].
    owner: Vec<u32>,
    free_chunks: Vec<u32>,
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

    /// Its dimensions.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The number of rows and of chunks held.
    pub fn counts(&self) -> (usize, usize) {
        (self.by_key.len(), self.owner.len() - self.free_chunks.len())
    }

    /// Bytes held (vectors, their bookkeeping and the rows'), an estimate within a few percent.
    pub fn bytes(&self) -> usize {
        let per_row = std::mem::size_of::<Option<Entry>>() + 48;
        self.codes.capacity()
            + self.scales.capacity() * 4
            + self.owner.capacity() * 4
            + self.rows.capacity() * per_row
            + self
                .rows
                .iter()
                .flatten()
                .map(|e| e.id.len() + e.chunks.capacity() * 4)
                .sum::<usize>()
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
        let mut chunks = Vec::with_capacity(scales.len());
        for (c, &s) in codes.chunks_exact(self.dim).zip(scales) {
            let ix = match self.free_chunks.pop() {
                Some(ix) => {
                    let at = ix as usize * self.dim;
                    self.codes[at..at + self.dim].copy_from_slice(c);
                    self.scales[ix as usize] = s;
                    self.owner[ix as usize] = slot;
                    ix
                }
                None => {
                    self.codes.extend_from_slice(c);
                    self.scales.push(s);
                    self.owner.push(slot);
                    (self.owner.len() - 1) as u32
                }
            };
            chunks.push(ix);
        }
        let id: Arc<str> = id.into();
        self.by_key.insert((t, id.clone()), slot);
        self.rows[slot as usize] = Some(Entry {
            table: t,
            id,
            version,
            hash,
            chunks,
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
            for c in e.chunks {
                self.owner[c as usize] = FREE;
                self.scales[c as usize] = 0.0;
                self.free_chunks.push(c);
            }
        }
        self.free_rows.push(slot);
        true
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
        // Each row's best chunk.
        let mut best: HashMap<u32, (f32, u32)> = HashMap::new();
        let mut firsts: Vec<(u32, f32, u32)> = Vec::with_capacity(self.owner.len());
        for (c, (&slot, &r)) in self.owner.iter().zip(&raw).enumerate() {
            if slot == FREE || Some(slot) == except {
                continue;
            }
            let Some(e) = &self.rows[slot as usize] else {
                continue;
            };
            if !table_ok[e.table as usize] {
                continue;
            }
            let s = r as f32 * self.scales[c] * q_scale;
            if e.chunks.len() == 1 {
                firsts.push((slot, s, c as u32));
            } else {
                let b = best.entry(slot).or_insert((f32::MIN, c as u32));
                if s > b.0 {
                    *b = (s, c as u32);
                }
            }
        }
        firsts.extend(best.into_iter().map(|(slot, (s, c))| (slot, s, c)));
        let by_score =
            |a: &(u32, f32, u32), b: &(u32, f32, u32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if firsts.len() > k {
            firsts.select_nth_unstable_by(k - 1, by_score);
            firsts.truncate(k);
        }
        firsts.sort_by(by_score);
        firsts
            .into_iter()
            .map(|(slot, score, c)| {
                let chunk = self.rows[slot as usize]
                    .as_ref()
                    .and_then(|e| e.chunks.iter().position(|&x| x == c))
                    .unwrap_or(0);
                Scored { slot, score, chunk }
            })
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
    }
}
