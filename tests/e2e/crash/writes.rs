//! Concurrent clients stream row writes; the server is SIGKILLed in the middle, restarted, and
//! every acknowledged write is there, the journal agrees with the index and the files, and the
//! recovery invents no hand edit.

use super::*;

const TABLE: &str = "bench.crash.items";
const WORKERS: usize = 4;
const CYCLES: usize = 5;
const STATUSES: [&str; 3] = ["todo", "doing", "done"];

/// A tiny deterministic generator (xorshift64*), seeded per run so kills land at varying moments.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
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

pub(super) enum Sent {
    Ok(Value),
    Refused(u16, Value),
    Lost,
}

pub(super) fn send(
    http: &reqwest::blocking::Client,
    url: &str,
    token: &str,
    op: &str,
    args: &Value,
) -> Sent {
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
pub(super) fn all_migrations(s: &Server) -> Vec<Value> {
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
