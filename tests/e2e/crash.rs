//! Kill -9 durability: concurrent clients stream row writes, the server is SIGKILLed in the
//! middle of the stream, restarted, and every acknowledged write must be there, the journal must
//! agree with the index and the files, and the recovery must not invent hand edits.

use crate::engine::semantic::{
    NOTES, assert_consistent, bulk, bulk_long, ids, notes_table, search,
};
use crate::kit::*;
use datanotes::engine::files;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const TABLE: &str = "bench.crash.items";
const WORKERS: usize = 4;
const CYCLES: usize = 5;
const STATUSES: [&str; 3] = ["todo", "doing", "done"];

/// A tiny deterministic generator (xorshift64*), seeded per run so kills land at varying moments.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A row as the clients expect it: `{version, values, body}` like the journal's row states.
#[derive(Debug, Clone, PartialEq)]
struct RowState {
    version: i64,
    values: Value,
    body: String,
}

impl RowState {
    fn matches(&self, version: i64, values: &Value, body: &str) -> bool {
        self.version == version && &self.values == values && self.body == body
    }
}

/// What a client knows about one of its rows: the acknowledged state, and for a write in flight
/// when the server died, the state that write would have produced (it may or may not be there).
#[derive(Debug, Clone, Default)]
struct Tracked {
    state: Option<RowState>,
    in_flight: Option<Option<RowState>>,
}

/// An acknowledged write: its seq, row, operation and the state it produced (None: deleted).
#[derive(Debug, Clone)]
struct Ack {
    seq: i64,
    id: String,
    op: &'static str,
    after: Option<RowState>,
    cycle: usize,
}

/// One client: its own rows (disjoint from the other clients'), so the expected state is exact.
struct Client {
    n: usize,
    rng: Rng,
    next_id: usize,
    rows: BTreeMap<String, Tracked>,
    acks: Vec<Ack>,
}

enum Sent {
    Ok(Value),
    Refused(u16, Value),
    Lost,
}

fn send(http: &reqwest::blocking::Client, url: &str, token: &str, op: &str, args: &Value) -> Sent {
    let r = http
        .post(format!("{url}/datanotes/{op}/"))
        .bearer_auth(token)
        .header("X-Datanotes-Actor", "crash test / client")
        .json(args)
        .send();
    let resp = match r {
        Ok(r) => r,
        Err(_) => return Sent::Lost,
    };
    let status = resp.status().as_u16();
    match resp.text() {
        Ok(text) => {
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            if status == 200 {
                Sent::Ok(v)
            } else {
                Sent::Refused(status, v)
            }
        }
        Err(_) => Sent::Lost,
    }
}

impl Client {
    /// Streams writes until the server goes away (or `stop`). Errs on a refusal (a client bug or
    /// an engine that lost a row).
    fn run(
        &mut self,
        url: &str,
        token: &str,
        cycle: usize,
        stop: &AtomicBool,
        acked: &AtomicUsize,
    ) -> Result<(), String> {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        while !stop.load(Ordering::Relaxed) {
            let live: Vec<String> = self
                .rows
                .iter()
                .filter(|(_, t)| t.state.is_some())
                .map(|(id, _)| id.clone())
                .collect();
            let dice = self.rng.below(100);
            let status = STATUSES[self.rng.below(3) as usize];
            let k = self.rng.below(1_000_000) as i64;
            let (op, id, args, after): (&'static str, String, Value, Option<RowState>) =
                if live.is_empty() || dice < 45 {
                    self.next_id += 1;
                    let id = format!("w{}-{}", self.n, self.next_id);
                    let values = json!({"title": format!("Row {id}"), "n": k, "status": status});
                    let body = format!("Body of {id}, written in cycle {cycle}.\n");
                    let args = json!({"table": TABLE, "id": id, "values": values, "body": body});
                    let after = RowState {
                        version: 1,
                        values,
                        body,
                    };
                    ("insert", id, args, Some(after))
                } else {
                    let id = live[self.rng.below(live.len() as u64) as usize].clone();
                    let cur = self.rows[&id].state.clone().unwrap();
                    if dice < 80 {
                        let mut values = cur.values.clone();
                        values["n"] = json!(k);
                        values["status"] = json!(status);
                        let mut args = json!({"table": TABLE, "id": id,
                            "values": {"n": k, "status": status}, "expect_version": cur.version});
                        let mut body = cur.body.clone();
                        if dice.is_multiple_of(2) {
                            body = format!("Body of {id}, version {}.\n", cur.version + 1);
                            args["body"] = json!(body);
                        }
                        let after = RowState {
                            version: cur.version + 1,
                            values,
                            body,
                        };
                        ("update", id, args, Some(after))
                    } else {
                        (
                            "delete",
                            id.clone(),
                            json!({"table": TABLE, "id": id}),
                            None,
                        )
                    }
                };
            let op_name = match op {
                "insert" => "insert_row",
                "update" => "update_row",
                _ => "delete_row",
            };
            match send(&http, url, token, op_name, &args) {
                Sent::Ok(v) => {
                    let seq = v["seq"]
                        .as_i64()
                        .ok_or_else(|| format!("{op_name} {args} answered without a seq: {v}"))?;
                    if let (Some(a), Some(version)) = (&after, v["version"].as_i64())
                        && a.version != version
                    {
                        return Err(format!(
                            "{op_name} {args} answered version {version}, expected {}",
                            a.version
                        ));
                    }
                    self.rows.entry(id.clone()).or_default().state = after.clone();
                    self.acks.push(Ack {
                        seq,
                        id,
                        op,
                        after,
                        cycle,
                    });
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                Sent::Refused(status, v) => {
                    return Err(format!("{op_name} {args} was refused ({status}): {v}"));
                }
                Sent::Lost => {
                    // The server died with this write in flight: it may or may not have landed.
                    self.rows.entry(id).or_default().in_flight = Some(after);
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// Every migration of the journal, oldest first (paged: `list_migrations` caps its limit).
fn all_migrations(s: &Server) -> Vec<Value> {
    let mut out = vec![];
    let mut before: Option<i64> = None;
    loop {
        let mut args = json!({"limit": 5000});
        if let Some(b) = before {
            args["before"] = json!(b);
        }
        let page = s.ok("list_migrations", args)["migrations"]
            .as_array()
            .cloned()
            .unwrap();
        let Some(last) = page.last() else { break };
        before = Some(last["seq"].as_i64().unwrap());
        out.extend(page);
    }
    out.reverse();
    out
}

/// The row as `get_row` answers it: Some((version, values, body)) or None for 404.
fn get_row(s: &Server, id: &str) -> Option<(i64, Value, String)> {
    let (st, v) = s.call("get_row", json!({"table": TABLE, "id": id}));
    match st {
        200 => Some((
            v["version"].as_i64().unwrap(),
            v["values"].clone(),
            v["body"].as_str().unwrap_or_default().to_string(),
        )),
        404 => None,
        _ => panic!("get_row {id} answered {st}: {v}"),
    }
}

/// The row as its file on disk parses: Some((values, body)) or None if there is no file.
fn read_file(dir: &Path, id: &str) -> Option<(Value, String)> {
    let path = files::row_path(dir, TABLE, id);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    };
    let rf = files::parse_row(&text)
        .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
    Some((Value::Object(rf.values), rf.body))
}

fn describe(state: &Option<RowState>) -> String {
    match state {
        Some(r) => format!("v{} {} {:?}", r.version, r.values, r.body),
        None => "absent".into(),
    }
}

/// After a restart: settles the writes that were in flight, then checks everything.
fn verify(s: &Server, clients: &mut [Client], acks_total: usize, cycle: usize) -> i64 {
    let mut failures: Vec<String> = vec![];
    // 1. Writes in flight at the kill: the row is in its acknowledged state or in the new one.
    for c in clients.iter_mut() {
        for (id, t) in c.rows.iter_mut() {
            let Some(would) = t.in_flight.take() else {
                continue;
            };
            let got = get_row(s, id);
            let is = |st: &Option<RowState>| match (st, &got) {
                (None, None) => true,
                (Some(r), Some((v, vals, b))) => r.matches(*v, vals, b),
                _ => false,
            };
            if is(&would) {
                t.state = would;
            } else if !is(&t.state) {
                failures.push(format!(
                    "row {id}: after the kill it is {got:?}, neither its acknowledged state ({}) nor the state of the write in flight ({})",
                    describe(&t.state),
                    describe(&would)
                ));
            }
        }
    }
    // 2. Every acknowledged write is in the index (the latest state of each row).
    let mut expected: BTreeMap<String, Option<RowState>> = BTreeMap::new();
    for c in clients.iter() {
        for (id, t) in &c.rows {
            expected.insert(id.clone(), t.state.clone());
        }
    }
    for (id, want) in &expected {
        let got = get_row(s, id);
        let ok = match (want, &got) {
            (None, None) => true,
            (Some(r), Some((v, vals, b))) => r.matches(*v, vals, b),
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "row {id}: acknowledged state {} but get_row answers {got:?}",
                describe(want)
            ));
        }
    }
    // 3. The journal holds every acknowledged write under its seq.
    let migs = all_migrations(s);
    let by_seq: HashMap<i64, &Value> = migs
        .iter()
        .map(|m| (m["seq"].as_i64().unwrap(), m))
        .collect();
    let acks: Vec<&Ack> = clients.iter().flat_map(|c| c.acks.iter()).collect();
    assert_eq!(acks.len(), acks_total);
    let mut seqs = BTreeSet::new();
    for a in &acks {
        if !seqs.insert(a.seq) {
            failures.push(format!("seq {} was acknowledged twice", a.seq));
        }
        let Some(m) = by_seq.get(&a.seq) else {
            failures.push(format!(
                "acknowledged {} of row {} (seq {}, cycle {}) is missing from the journal",
                a.op, a.id, a.seq, a.cycle
            ));
            continue;
        };
        let after_ok = match &a.after {
            None => m["after"].is_null(),
            Some(r) => r.matches(
                m["after"]["version"].as_i64().unwrap_or(-1),
                &m["after"]["values"],
                m["after"]["body"].as_str().unwrap_or("\u{0}"),
            ),
        };
        if m["op"] != a.op || m["row"] != a.id.as_str() || m["table"] != TABLE || !after_ok {
            failures.push(format!(
                "acknowledged {} of row {} (seq {}) is journaled as {m}",
                a.op, a.id, a.seq
            ));
        }
    }
    // 4. Recovery invented no hand edit.
    for m in &migs {
        if m["op"] == "hand_edit" || m["actor"]["harness"] == "hand edit" {
            failures.push(format!("the recovery journaled a hand edit: {m}"));
        }
    }
    // 5. The journal agrees with the index and the files: each row's latest migration.
    let mut latest: BTreeMap<String, &Value> = BTreeMap::new();
    for m in &migs {
        if m["table"] == TABLE
            && let Some(id) = m["row"].as_str()
        {
            latest.insert(id.to_string(), m);
        }
    }
    for id in expected.keys() {
        if !latest.contains_key(id) && expected[id].is_some() {
            failures.push(format!("row {id} exists but has no migration"));
        }
    }
    for (id, m) in &latest {
        let after = &m["after"];
        let got = get_row(s, id);
        let file = read_file(&s.dir, id);
        let ok = if after.is_null() {
            got.is_none() && file.is_none()
        } else {
            let (v, vals, body) = (
                after["version"].as_i64(),
                &after["values"],
                after["body"].as_str().unwrap_or_default(),
            );
            got.as_ref()
                .is_some_and(|(gv, gvals, gb)| Some(*gv) == v && gvals == vals && gb == body)
                && file
                    .as_ref()
                    .is_some_and(|(fvals, fb)| fvals == vals && fb == body)
        };
        if !ok {
            failures.push(format!(
                "row {id}: journal says {after}, get_row {got:?}, file {file:?}"
            ));
        }
    }
    // No file the journal does not know of.
    let dir = files::table_dir(&s.dir, TABLE);
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(id) = name.strip_suffix(".md")
            && !id.starts_with('.')
            && latest.get(id).is_none_or(|m| m["after"].is_null())
        {
            failures.push(format!("file {name} has no live row in the journal"));
        }
    }
    // 6. No invalid row, and the row count matches.
    let d = s.ok("describe_table", json!({"table": TABLE}));
    if d["invalid"] != json!([]) {
        failures.push(format!(
            "describe_table reports invalid rows: {}",
            d["invalid"]
        ));
    }
    let live = expected.values().filter(|v| v.is_some()).count() as i64;
    if d["rows"].as_i64() != Some(live) {
        failures.push(format!(
            "describe_table counts {} rows, expected {live}",
            d["rows"]
        ));
    }
    // 7. Seqs: each client's acknowledged seqs grow, and the engine's seq is past all of them.
    for c in clients.iter() {
        for w in c.acks.windows(2) {
            if w[1].seq <= w[0].seq {
                failures.push(format!(
                    "client {}: seq {} acknowledged after seq {}",
                    c.n, w[1].seq, w[0].seq
                ));
            }
        }
    }
    let max_journal = migs.last().map(|m| m["seq"].as_i64().unwrap()).unwrap_or(0);
    let max_acked = acks.iter().map(|a| a.seq).max().unwrap_or(0);
    let (_, h) = s.get("/datanotes/health");
    let health_seq = h["seq"].as_i64().unwrap_or(-1);
    if health_seq < max_acked || health_seq < max_journal {
        failures.push(format!(
            "after restart health seq {health_seq} is behind (acked {max_acked}, journal {max_journal})"
        ));
    }
    assert!(
        failures.is_empty(),
        "cycle {cycle}: {} failure(s):\n{}",
        failures.len(),
        failures
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    max_journal.max(max_acked)
}

#[test]
fn kill_9_loses_no_acknowledged_write() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("crash test seed {seed}");
    let mut rng = Rng::new(seed);
    // With the semantic index on: after each restart it must hold every row once, at its
    // current version, like the index and the files.
    let mut s = Server::start_semantic(&[]);
    s.ok(
        "create_table",
        json!({"table": TABLE, "columns": {
            "title": {"type": "text", "required": true},
            "n": {"type": "integer"},
            "status": {"type": "enum", "values": STATUSES},
        }}),
    );
    let mut clients: Vec<Client> = (0..WORKERS)
        .map(|n| Client {
            n,
            rng: Rng::new(seed ^ (n as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            next_id: 0,
            rows: BTreeMap::new(),
            acks: vec![],
        })
        .collect();
    let mut floor = 0i64;
    for cycle in 0..CYCLES {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let (url, token) = (s.url.clone(), s.token.clone());
        let handles: Vec<_> = clients
            .drain(..)
            .map(|mut c| {
                let (url, token, stop, acked) =
                    (url.clone(), token.clone(), stop.clone(), acked.clone());
                std::thread::spawn(move || {
                    let r = c.run(&url, &token, cycle, &stop, &acked);
                    (c, r)
                })
            })
            .collect();
        // Let the stream run, then kill the server in its middle: once it has acknowledged a
        // write, however long the first one takes on a loaded machine.
        // The random point in the stream is a time by design (no event marks "the middle").
        let wait = Duration::from_millis(300 + rng.below(900));
        let t0 = Instant::now();
        std::thread::sleep(wait);
        poll(Duration::from_secs(60), Duration::from_millis(5), || {
            (acked.load(Ordering::Relaxed) > 0).then_some(())
        });
        s.kill();
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let (c, r) = h.join().expect("client thread");
            if let Err(e) = r {
                panic!("cycle {cycle}, client {}: {e}", c.n);
            }
            clients.push(c);
        }
        let in_cycle: usize = clients
            .iter()
            .map(|c| c.acks.iter().filter(|a| a.cycle == cycle).count())
            .sum();
        let in_flight: usize = clients
            .iter()
            .map(|c| c.rows.values().filter(|t| t.in_flight.is_some()).count())
            .sum();
        eprintln!(
            "cycle {cycle}: killed after {:?}: {in_cycle} writes acknowledged, {in_flight} in flight",
            t0.elapsed()
        );
        assert!(in_cycle > 0, "cycle {cycle}: no write was acknowledged");
        let first = clients
            .iter()
            .flat_map(|c| c.acks.iter().filter(|a| a.cycle == cycle))
            .map(|a| a.seq)
            .min()
            .unwrap();
        assert!(
            first > floor,
            "cycle {cycle}: seq {first} acknowledged after a restart is not past {floor}"
        );
        s = s.restart_killed();
        // Seqs keep growing across the restart: the first write after it is past everything.
        let acks_total: usize = clients.iter().map(|c| c.acks.len()).sum();
        let top = verify(&s, &mut clients, acks_total, cycle);
        assert_consistent(&s, &[TABLE]);
        assert!(
            top >= floor,
            "the journal's top seq went back from {floor} to {top}"
        );
        let probe = format!("probe-{cycle}");
        let v = s.ok(
            "insert_row",
            json!({"table": TABLE, "id": probe, "values": {"title": "probe", "status": "todo"}}),
        );
        let seq = v["seq"].as_i64().unwrap();
        assert!(seq > top, "seq {seq} after restart is not past {top}");
        let v = s.ok("delete_row", json!({"table": TABLE, "id": probe}));
        floor = v["seq"].as_i64().unwrap();
        assert!(floor > seq);
    }
    // A clean restart after all that changes nothing either.
    let acks_total: usize = clients.iter().map(|c| c.acks.len()).sum();
    s = s.restart();
    verify(&s, &mut clients, acks_total, CYCLES);
    assert_consistent(&s, &[TABLE]);
}

// ---- the crash matrix: kill -9 in the middle of each maintenance operation ----

/// The table every case works on, and a second one that links to it.
const MT: &str = "m.crash.items";

/// `DATANOTES_CRASH_LONG=1` runs the long profile: more rows, more kills per operation
/// (`DATANOTES_CRASH_CASE=TEXT` narrows it to some operations).
fn long_profile() -> bool {
    std::env::var("DATANOTES_CRASH_LONG").is_ok_and(|v| v == "1")
}

/// Copies a stopped database folder.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().unwrap().is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Every row of a table through `select_rows`: id → (version, values without nulls, body).
fn all_rows(s: &Server, table: &str) -> BTreeMap<String, (i64, Value, String)> {
    let (status, d) = s.call("describe_table", json!({"table": table}));
    if status == 404 {
        return BTreeMap::new();
    }
    let mut cols: Vec<String> = d["columns"].as_object().unwrap().keys().cloned().collect();
    cols.push("body".into());
    let v = s.ok(
        "select_rows",
        json!({"table": table, "limit": 10000, "columns": cols}),
    );
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut values = r["values"].clone();
            if let Some(o) = values.as_object_mut() {
                o.retain(|_, v| !v.is_null());
            }
            (
                r["id"].as_str().unwrap().to_string(),
                (
                    r["version"].as_i64().unwrap(),
                    values,
                    r["body"].as_str().unwrap_or_default().to_string(),
                ),
            )
        })
        .collect()
}

/// The row files of a table folder: id → (values, body) as they parse.
fn row_files(root: &Path, table: &str) -> BTreeMap<String, (Value, String)> {
    let dir = files::table_dir(root, table);
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(id) = name.strip_suffix(".md") else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        let rf = files::parse_row(&text).unwrap_or_else(|e| panic!("{name} does not parse: {e}"));
        out.insert(id.to_string(), (Value::Object(rf.values), rf.body));
    }
    out
}

/// The rows the hand-edit case edits by hand.
const HAND_EDITED: usize = 300;

/// What a case starts from: the rows (id → version) and the journal's length.
struct Before {
    versions: BTreeMap<String, i64>,
    migrations: usize,
}

/// One maintenance operation: what runs before it (answering the operation and its arguments),
/// and whether it finds hand edits (the scan case).
struct Case {
    name: &'static str,
    prepare: fn(&Server) -> (&'static str, Value),
}

fn cases() -> Vec<Case> {
    fn alter(s: &Server, args: Value) -> i64 {
        let mut a = args;
        a["table"] = json!(MT);
        s.ok("alter_table", a)["seq"].as_i64().unwrap()
    }
    vec![
        Case {
            name: "alter: rename a column",
            prepare: |_| {
                (
                    "alter_table",
                    json!({"table": MT, "rename": {"title": "name"}}),
                )
            },
        },
        Case {
            name: "alter: drop a column",
            prepare: |_| ("alter_table", json!({"table": MT, "drop": ["tag"]})),
        },
        Case {
            name: "alter: add a required column with a default",
            prepare: |_| {
                (
                    "alter_table",
                    json!({"table": MT, "add": {"flag": {"type": "boolean", "required": true, "default": false}}}),
                )
            },
        },
        Case {
            name: "undo of a rename",
            prepare: |s| {
                let seq = alter(s, json!({"rename": {"title": "name"}}));
                ("undo_migration", json!({"seq": seq}))
            },
        },
        Case {
            name: "undo of a drop",
            prepare: |s| {
                let seq = alter(s, json!({"drop": ["tag"]}));
                ("undo_migration", json!({"seq": seq}))
            },
        },
        Case {
            name: "undo of an add",
            prepare: |s| {
                let seq = alter(
                    s,
                    json!({"add": {"flag": {"type": "boolean", "required": true, "default": true}}}),
                );
                ("undo_migration", json!({"seq": seq}))
            },
        },
        Case {
            name: "drop_table",
            prepare: |_| ("drop_table", json!({"table": MT})),
        },
        Case {
            name: "undo of drop_table",
            prepare: |s| {
                let seq = s.ok("drop_table", json!({"table": MT}))["seq"]
                    .as_i64()
                    .unwrap();
                ("undo_migration", json!({"seq": seq}))
            },
        },
        Case {
            name: "restore of a table",
            prepare: |s| {
                let seq = s.seq();
                for i in 0..40 {
                    s.ok(
                        "update_row",
                        json!({"table": MT, "id": format!("r{i}"), "values": {"n": -1}}),
                    );
                }
                ("restore", json!({"table": MT, "seq": seq}))
            },
        },
        Case {
            name: "undo of a row update",
            prepare: |s| {
                let seq = s.ok(
                    "update_row",
                    json!({"table": MT, "id": "r1", "values": {"title": "changed"}}),
                )["seq"]
                    .as_i64()
                    .unwrap();
                ("undo_migration", json!({"seq": seq}))
            },
        },
        Case {
            name: "vacuum",
            prepare: |s| {
                let seq = s.seq();
                ("vacuum", json!({"before_seq": seq - 5}))
            },
        },
        Case {
            name: "rebuild_index",
            prepare: |_| ("rebuild_index", json!({})),
        },
        Case {
            name: "hand-edit scan",
            // The owner edits many rows by hand at once: the watcher's scan, then the rebuild's,
            // journal them; the kill lands in either.
            prepare: |s| {
                for i in 0..HAND_EDITED {
                    let path = files::row_path(&s.dir, MT, &format!("r{i}"));
                    let text = std::fs::read_to_string(&path).unwrap();
                    std::fs::write(&path, text.replace("title: Row", "title: Hand")).unwrap();
                }
                ("rebuild_index", json!({}))
            },
        },
        Case {
            name: "set_engine_settings",
            prepare: |_| {
                (
                    "set_engine_settings",
                    json!({"settings": {"default_limit": 7, "max_body_bytes": 500000}}),
                )
            },
        },
    ]
}

/// The base database: `rows` rows in MT (title, n, tag), made once and copied for every round.
fn base_database(rows: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("base");
    let mut s = Server::start_in(&dir);
    s.ok(
        "create_table",
        json!({"table": MT, "columns": {
            "title": {"type": "text", "required": true},
            "n": {"type": "integer"},
            "tag": {"type": "text"},
        }}),
    );
    let (url, token) = (s.url.clone(), s.token.clone());
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let (url, token) = (url.clone(), token.clone());
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::new();
                for i in (k..rows).step_by(4) {
                    let args = json!({"table": MT, "id": format!("r{i}"),
                        "values": {"title": format!("Row {i}"), "n": i, "tag": if i % 3 == 0 { Value::Null } else { json!("t") }},
                        "body": format!("Body {i}\n")});
                    match send(&http, &url, &token, "insert_row", &args) {
                        Sent::Ok(_) => {}
                        _ => panic!("seeding row {i} failed"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    s.stop();
    (tmp, dir)
}

/// Kills the server at the first change of a file in place: the table's definition, one of its
/// first rows, the settings, or the table folder's existence (temp files staged beside the rows
/// before the journal commits do not count), or after `limit`.
fn kill_at_first_file_change(root: &Path, pid: u32, limit: Duration) -> bool {
    let dir = files::table_dir(root, MT);
    let mut watched = vec![
        dir.join(files::TABLE_FILE),
        root.join(".datanotes/settings.json"),
    ];
    watched.extend((0..8).map(|i| files::row_path(root, MT, &format!("r{i}"))));
    let look = || -> (bool, Vec<Option<(std::time::SystemTime, u64)>>) {
        let files = watched
            .iter()
            .map(|p| {
                p.symlink_metadata()
                    .ok()
                    .map(|m| (m.modified().unwrap(), m.len()))
            })
            .collect();
        (dir.exists(), files)
    };
    let first = look();
    let changed = poll(limit, Duration::from_micros(100), || {
        (look() != first).then_some(())
    });
    if changed.is_some() {
        signal(pid, 9);
    }
    changed.is_some()
}

/// After a restart: the server serves one consistent state.
fn check_after_crash(
    s: &Server,
    case: &str,
    before: &Before,
    op: &str,
    args: &Value,
    acked: Option<&Value>,
) {
    let ctx = |what: String| format!("{case}: {what}");
    // The journal invents nothing: no hand edit but the owner's, each once and as the file
    // has it; and the operation is there if it was answered.
    let migs = all_migrations(s);
    let hand: Vec<&Value> = migs.iter().filter(|m| m["op"] == "hand_edit").collect();
    let by_hand: BTreeSet<String> = if case.starts_with("hand-edit") {
        (0..HAND_EDITED).map(|i| format!("r{i}")).collect()
    } else {
        BTreeSet::new()
    };
    let mut seen = BTreeSet::new();
    for m in &hand {
        let id = m["row"].as_str().unwrap_or_default().to_string();
        assert!(
            by_hand.contains(&id) && seen.insert(id.clone()),
            "{}",
            ctx(format!("a hand edit was invented or journaled twice: {m}"))
        );
        assert!(
            m["after"]["values"]["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("Hand")),
            "{}",
            ctx(format!(
                "a hand edit journaled what the file never had: {m}"
            ))
        );
    }
    // The scan at the restart found whatever the killed scan had not journaled.
    assert_eq!(
        seen.len(),
        by_hand.len(),
        "{}",
        ctx("hand edits are missing from the journal".into())
    );
    if let Some(v) = acked
        && let Some(seq) = v["seq"].as_i64()
        && op != "vacuum"
    {
        assert!(
            migs.iter().any(|m| m["seq"] == seq),
            "{}",
            ctx(format!(
                "the acknowledged {op} (seq {seq}) is not in the journal"
            ))
        );
    }
    if op != "vacuum" {
        assert!(
            migs.len() >= before.migrations,
            "{}",
            ctx("the journal lost migrations".into())
        );
    }
    // The feed reads the same journal.
    let top = migs.last().map(|m| m["seq"].as_i64().unwrap()).unwrap_or(0);
    let page = s.ok_route("changes", json!({"since": top - 1, "limit": 10}));
    assert_eq!(
        page["changes"]
            .as_array()
            .unwrap()
            .last()
            .map(|c| c["seq"].clone()),
        Some(json!(top)),
        "{}",
        ctx("the feed does not end where the journal does".into())
    );
    let tables = s.ok("list_tables", json!({}));
    let exists = tables["tables"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["table"] == MT);
    let dir = files::table_dir(&s.dir, MT);
    if !exists {
        // Gone: dropped, or still dropped because the undo of a drop was killed before it took
        // effect (not acknowledged: the state before it is the consistent one).
        assert!(
            op == "drop_table" || (case == "undo of drop_table" && acked.is_none()),
            "{}",
            ctx("the table is gone after a crash".into())
        );
        assert!(
            !dir.exists(),
            "{}",
            ctx("the table is dropped but its folder is there".into())
        );
        return;
    }
    if op == "drop_table" && acked.is_some() {
        panic!(
            "{}",
            ctx("an acknowledged drop_table left the table".into())
        );
    }
    // Every row valid under one definition, and the index agrees with the files.
    let d = s.ok("describe_table", json!({"table": MT}));
    assert_eq!(
        d["invalid"],
        json!([]),
        "{}",
        ctx(format!(
            "rows are invalid after the restart (columns now {})",
            d["columns"]
        ))
    );
    let cols: BTreeSet<String> = d["columns"].as_object().unwrap().keys().cloned().collect();
    let rows = all_rows(s, MT);
    let on_disk = row_files(&s.dir, MT);
    assert_eq!(
        rows.keys().collect::<Vec<_>>(),
        on_disk.keys().collect::<Vec<_>>(),
        "{}",
        ctx("the index and the folder hold different rows".into())
    );
    for (id, (version, values, body)) in &rows {
        let (fv, fb) = &on_disk[id];
        assert_eq!(
            (values, body),
            (fv, fb),
            "{}",
            ctx(format!("row {id}: the index and its file differ"))
        );
        for k in fv.as_object().unwrap().keys() {
            assert!(
                cols.contains(k),
                "{}",
                ctx(format!(
                    "row {id} has column {k}, which the definition has not"
                ))
            );
        }
        if let Some(v0) = before.versions.get(id) {
            assert!(
                version >= v0,
                "{}",
                ctx(format!("row {id} went back from version {v0} to {version}"))
            );
        }
    }
    if acked.is_some()
        && op == "alter_table"
        && let Some(r) = args["rename"].as_object()
    {
        {
            for new in r.values() {
                assert!(
                    cols.contains(new.as_str().unwrap()),
                    "{}",
                    ctx("the acknowledged rename is not there".into())
                );
            }
        }
    }
}

/// Runs one round: a copy of the base, the case's preparation, the operation killed at a moment
/// given by `kill` (None: the first file change), a restart and the checks. Answers how long
/// the operation ran when it was not killed.
fn crash_round(base: &Path, case: &Case, kill: Option<Duration>, round: usize) -> Duration {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    copy_dir(base, &dir);
    let mut s = Server::start_in(&dir);
    let (op, args) = (case.prepare)(&s);
    let before = Before {
        versions: all_rows(&s, MT)
            .into_iter()
            .map(|(id, (v, _, _))| (id, v))
            .collect(),
        migrations: all_migrations(&s).len(),
    };
    let pid = s.child.as_ref().unwrap().id();
    let (url, token) = (s.url.clone(), s.token.clone());
    let (op2, args2) = (op.to_string(), args.clone());
    let t0 = Instant::now();
    let caller = std::thread::spawn(move || {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let r = send(&http, &url, &token, &op2, &args2);
        (r, t0.elapsed())
    });
    let killed = match kill {
        Some(d) if d == Duration::MAX => false,
        Some(d) => {
            // The kill lands `d` into the operation: a time by design (the rounds sweep it).
            std::thread::sleep(d);
            signal(pid, 9);
            true
        }
        None => kill_at_first_file_change(&s.dir, pid, Duration::from_secs(20)),
    };
    let (sent, took) = caller.join().unwrap();
    let acked = match sent {
        Sent::Ok(v) => Some(v),
        Sent::Refused(st, v) => panic!("{}: {op} was refused ({st}): {v}", case.name),
        Sent::Lost => None,
    };
    if !killed {
        assert!(acked.is_some(), "{}: {op} was not answered", case.name);
    }
    eprintln!(
        "crash matrix: {} (round {round}): {}, answered: {}",
        case.name,
        match kill {
            Some(d) if d == Duration::MAX => "not killed".to_string(),
            Some(d) => format!("killed after {d:?}"),
            None if killed => "killed at the first file change".into(),
            None => "no file change seen".into(),
        },
        acked.is_some()
    );
    s = if killed {
        s.restart_killed()
    } else {
        s.restart()
    };
    check_after_crash(&s, case.name, &before, op, &args, acked.as_ref());
    // The server takes writes again, and a second restart changes nothing.
    if all_rows(&s, MT).contains_key("r2") {
        s.ok(
            "update_row",
            json!({"table": MT, "id": "r2", "values": {"n": 7}}),
        );
    }
    let migs = all_migrations(&s).len();
    s = s.restart();
    assert_eq!(
        all_migrations(&s).len(),
        migs,
        "{}: a clean restart after recovery journaled something",
        case.name
    );
    drop(s);
    took
}

#[test]
fn kill_9_during_maintenance_leaves_one_consistent_state() {
    let long = long_profile();
    let rows = if long { 4000 } else { 600 };
    let random_rounds = if long { 6 } else { 1 };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("crash matrix seed {seed}, {rows} rows");
    let mut rng = Rng::new(seed);
    let (_tmp, base) = base_database(rows);
    // `DATANOTES_CRASH_CASE=rename` runs only the cases whose name holds that text.
    let only = std::env::var("DATANOTES_CRASH_CASE").unwrap_or_default();
    for case in cases().into_iter().filter(|c| c.name.contains(&only)) {
        // How long the operation takes when nothing happens to it (and that it works).
        let took = crash_round(&base, &case, Some(Duration::MAX), 0);
        crash_round(&base, &case, None, 1);
        for round in 0..random_rounds {
            let us = rng.below(took.as_micros().max(1) as u64 + 1);
            crash_round(&base, &case, Some(Duration::from_micros(us)), 2 + round);
        }
    }
}

// ---- the semantic index ----

/// The semantic index: `kill -9` during a rebuild, and during the
/// catch-up after a burst; after a restart the index holds every row once, at its current
/// version, and catches up by itself.
#[test]
fn kill_9_during_a_semantic_rebuild_or_catch_up_leaves_a_consistent_index() {
    let s = Server::start_semantic(&[]);
    notes_table(&s);
    bulk_long(&s, 600, 8, "k", 12);
    s.indexed();
    // During a rebuild.
    let mut s = s;
    std::thread::scope(|sc| {
        let url = s.url.clone();
        let token = s.token.clone();
        sc.spawn(move || {
            let _ = reqwest::blocking::Client::new()
                .post(format!("{url}/datanotes/rebuild_semantic_index/"))
                .bearer_auth(token)
                .json(&json!({}))
                .send();
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while s.semantic()["state"] != "building" {
            assert!(
                std::time::Instant::now() < deadline,
                "the rebuild never ran"
            );
        }
        s.kill();
    });
    let s = s.restart_killed();
    assert_consistent(&s, &[NOTES]);
    // During the catch-up after a burst of writes (updates and deletes among them).
    bulk(&s, 300, 8, "k2");
    for i in 0..50 {
        s.ok(
            "update_row",
            json!({"table": NOTES, "id": format!("k-{i}"), "body": format!("Changed {i}: about the sea")}),
        );
        s.ok(
            "delete_row",
            json!({"table": NOTES, "id": format!("k-{}", 100 + i)}),
        );
    }
    let s = s.restart_killed();
    assert_consistent(&s, &[NOTES]);
    let v = search(
        &s,
        json!({"query": "the ocean", "mode": "semantic", "limit": 3}),
    );
    assert!(ids(&v).iter().all(|id| id.starts_with("k-")), "{v}");
    assert_eq!(v["hits"][0]["version"], 2, "{v}");
}
