//! `resources`: a row read as an MCP resource against `get_row` over HTTP, and the apps'
//! resources and prompts listed through `/mcp`.

use super::*;
use agg::{mcp_raw_request, mcp_raw_session};

const S: &str = "resources";
/// Tools, resources and prompts of each remote app (`remote_app --bare --tool … --resources
/// --prompts`): as many tools as `agg`'s apps have, as many resources and prompts.
const TOOLS: usize = 20;
const RESOURCES: usize = 20;
const PROMPTS: usize = 20;
/// Rows read in turn, spread over the big table.
const READ_ROWS: usize = 100;
/// The table read when the big table has too few rows (it always has them after `load`).
const SMALL_TABLE: &str = "bench.resources.rows";

/// Both parts: rows read on the shared server, then the apps' content listed on a server of its
/// own.
pub(crate) fn section_resources(b: &mut Bench) -> Vec<Figure> {
    let mut out = read_rows(b);
    out.extend(list_content(b));
    out
}

/// The URI of a row of `table`.
fn row_uri(table: &str, id: &str) -> String {
    format!("datanotes://tables/{table}/rows/{id}")
}

/// `READ_ROWS` row ids of the big table, spread over it (in id order); or, when it has fewer
/// rows, of a small table made and filled here.
fn row_ids(s: &Server) -> (&'static str, Vec<String>) {
    let rows = Server::call_with(
        &s.http,
        &s.url,
        &s.token,
        "describe_table",
        &json!({"table": TABLE}),
    )
    .map(|d| d["rows"].as_u64().unwrap_or(0) as usize)
    .unwrap_or(0);
    if rows >= READ_ROWS {
        let ids = (0..READ_ROWS)
            .map(|k| {
                let page = s.call(
                    "select_rows",
                    json!({"table": TABLE, "order_by": [{"column": "id", "dir": "asc"}],
                           "limit": 1, "offset": k * rows / READ_ROWS}),
                );
                page["rows"][0]["id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("a row at {k}: {page}"))
                    .to_string()
            })
            .collect();
        return (TABLE, ids);
    }
    progress(format!(
        "{TABLE} has {rows} rows: reading {READ_ROWS} rows of {SMALL_TABLE}"
    ));
    let made = Server::call_with(
        &s.http,
        &s.url,
        &s.token,
        "create_table",
        &json!({"table": SMALL_TABLE, "description": "rows read as resources",
                "columns": {"title": {"type": "text", "required": true}}}),
    );
    if let Err(e) = made {
        progress(format!("{SMALL_TABLE}: {e}"));
    }
    let mut rng = Rng(0x5eed_2e50_0e5c);
    let ids = (0..READ_ROWS)
        .map(|i| {
            let id = format!("res-{i:04}");
            let (values, body) = row_values(&mut rng, i);
            let args = json!({"table": SMALL_TABLE, "id": &id,
                              "values": {"title": values["title"]}, "body": body});
            if Server::call_with(&s.http, &s.url, &s.token, "insert_row", &args).is_err() {
                // Already there (a second run over the same database): read it as it is.
                s.call("get_row", json!({"table": SMALL_TABLE, "id": &id}));
            }
            id
        })
        .collect();
    (SMALL_TABLE, ids)
}

/// `resources/read` of a row through `/mcp` (a raw keep-alive session, the answer read, not
/// parsed) against `POST /datanotes/get_row/` of the same row (same client), interleaved.
fn read_rows(b: &mut Bench) -> Vec<Figure> {
    // A p99 needs samples: at least 1,000 of each, in the quick run too (as `agg`'s MCP loops).
    let n = (b.opts.app_calls * 4).max(1000);
    let root = b.dir.clone();
    let s = b.server();
    let (table, ids) = row_ids(s);
    let client = AsyncClient::new(s);
    let (rt, http) = (&client.rt, &client.http);
    let (url, token) = (client.url.as_str(), client.token.as_str());
    let sid = rt.block_on(mcp_raw_session(http, url, token));
    // Once, parsed: the read answers the row's file as it is on disk, get_row the row.
    let id = &ids[0];
    let body = rt.block_on(mcp_raw_body(
        http,
        url,
        token,
        &sid,
        "resources/read",
        json!({"uri": row_uri(table, id)}),
    ));
    let v = result_of(&body);
    let file = std::fs::read_to_string(files::row_path(&root, table, id)).expect("the row's file");
    assert_eq!(
        v["contents"][0]["text"].as_str(),
        Some(file.as_str()),
        "resources/read answers the row's file: {v}"
    );
    assert_eq!(v["contents"][0]["mimeType"], "text/markdown", "{v}");
    let r = s.call("get_row", json!({"table": table, "id": id}));
    assert_eq!(r["id"], json!(id), "get_row answers the row: {r}");
    let get_row = |args: &Value| {
        rt.block_on(async {
            let r = http
                .post(format!("{url}/datanotes/get_row/"))
                .bearer_auth(token)
                .json(args)
                .send()
                .await
                .expect("get_row");
            assert!(r.status().is_success(), "get_row: {}", r.status());
            r.bytes().await.expect("get_row").len()
        })
    };
    let (mut mcp, mut plain) = (vec![], vec![]);
    let (mut mcp_bytes, mut http_bytes) = (0, 0);
    for i in 0..20 + n {
        let id = &ids[i % ids.len()];
        let read = json!({"uri": row_uri(table, id)});
        let args = json!({"table": table, "id": id});
        let t0 = Instant::now();
        mcp_bytes = rt.block_on(mcp_raw_request(
            http,
            url,
            token,
            &sid,
            "resources/read",
            read,
        ));
        let d1 = t0.elapsed();
        let t0 = Instant::now();
        http_bytes = get_row(&args);
        let d2 = t0.elapsed();
        if i >= 20 {
            mcp.push(d1);
            plain.push(d2);
        }
    }
    let (lm, lh) = (Latency::of(&mcp), Latency::of(&plain));
    let ratio = lm.p50 / lh.p50;
    progress(format!(
        "a row of {table} ({} rows in turn, {n} reads of each): MCP resources/read p50 {:.3} ms, p99 {:.3} ms ({mcp_bytes} bytes); HTTP get_row p50 {:.3} ms, p99 {:.3} ms ({http_bytes} bytes); {ratio:.2}x",
        ids.len(),
        lm.p50,
        lm.p99,
        lh.p50,
        lh.p99
    ));
    let mut out = vec![];
    out.extend(
        lm.figures(S, "resources_read_row", None)
            .into_iter()
            .take(2),
    );
    out.extend(lh.figures(S, "http_get_row", None).into_iter().take(2));
    out.push(Figure::new(S, "resources_read_over_get_row", ratio, "x").target(Target::AtMost(1.3)));
    out
}

/// On a database of its own (no table: the vault's part of the listing is one empty page), K
/// remote apps (`b.opts.apps`, D of them down) with 20 tools, 20 resources and 20 prompts each:
/// every app resource listed through `/mcp` (`resources/list`, page by page over `nextCursor`),
/// then `prompts/list`, then (for reference) `tools/list`, on a raw keep-alive session, each
/// answer read, not parsed (only the cursor found in it), interleaved round by round.
fn list_content(b: &mut Bench) -> Vec<Figure> {
    let remote_bin = kit::example("remote_app");
    if !remote_bin.is_file() {
        skip(format!(
            "resources (listing): no {} (cargo build{} --example remote_app)",
            remote_bin.display(),
            crate::RELEASE_FLAG
        ));
        return vec![];
    }
    let (apps, down, calls) = (b.opts.apps, b.opts.apps_down, b.opts.app_calls);
    let tmp = tempfile::tempdir().expect("a database folder");
    let s = Server::start(&b.bin, tmp.path());
    let (url, token) = (s.url.clone(), s.token.clone());
    let mut running = vec![];
    for i in 0..apps - down {
        let name = format!("rc{i:02}");
        let v = s.call(
            "apps/create",
            json!({"name": &name, "self_url_private": true}),
        );
        let app_token = v["token"].as_str().expect("app token").to_string();
        let mut args = vec!["--bare".to_string()];
        for t in 1..=TOOLS {
            args.extend(["--tool".to_string(), format!("{name}_t{t}")]);
        }
        args.extend(["--resources".to_string(), RESOURCES.to_string()]);
        args.extend(["--prompts".to_string(), PROMPTS.to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        running.push(kit::App::spawn(&url, &name, &app_token, &args, true));
    }
    for i in 0..down {
        // Nothing listens on port 9 (discard) on this machine: connection refused.
        s.call(
            "apps/create",
            json!({"name": format!("down{i:02}"), "mcp_url": "http://127.0.0.1:9/mcp"}),
        );
    }
    let client = AsyncClient::new(&s);
    let (rt, http) = (&client.rt, &client.http);
    let sid = rt.block_on(mcp_raw_session(http, &url, &token));
    let (want_r, want_p) = ((apps - down) * RESOURCES, (apps - down) * PROMPTS);
    // Until the engine has listed every live app's resources and prompts (parsed, counted).
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut listed, mut prompts, mut pages);
    loop {
        let (mut cursor, mut n) = (None::<String>, 0);
        pages = 0;
        loop {
            let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
            let body = rt.block_on(mcp_raw_body(
                http,
                &url,
                &token,
                &sid,
                "resources/list",
                params,
            ));
            let page = result_of(&body);
            pages += 1;
            n += page["resources"]
                .as_array()
                .map_or(0, |r| r.iter().filter(|r| is_app_resource(r)).count());
            let next = page["nextCursor"].as_str().map(String::from);
            assert_eq!(
                next,
                next_cursor(&body),
                "the cursor found in the raw answer"
            );
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
            assert!(pages < 10_000, "resources/list never ends");
        }
        listed = n;
        let body = rt.block_on(mcp_raw_body(
            http,
            &url,
            &token,
            &sid,
            "prompts/list",
            json!({}),
        ));
        prompts = result_of(&body)["prompts"]
            .as_array()
            .map_or(0, |p| p.len());
        if (listed >= want_r && prompts >= want_p) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    progress(format!(
        "{} remote apps up, {down} down: {listed} of {want_r} app resources listed ({pages} pages), {prompts} of {want_p} prompts",
        apps - down
    ));
    // Once: an app's resource read and its prompt got through `/mcp`, as the app answers them.
    if apps > down {
        let v = result_of(&rt.block_on(mcp_raw_body(
            http,
            &url,
            &token,
            &sid,
            "resources/read",
            json!({"uri": "test://rc00/r1"}),
        )));
        assert_eq!(
            v["contents"][0]["text"], "resource r1 of app rc00",
            "an app's resource read through /mcp: {v}"
        );
        let v = result_of(&rt.block_on(mcp_raw_body(
            http,
            &url,
            &token,
            &sid,
            "prompts/get",
            json!({"name": "rc00_p1"}),
        )));
        assert_eq!(
            v["messages"][0]["content"]["text"], "prompt p1 of app rc00",
            "an app's prompt got through /mcp: {v}"
        );
    }
    let (mut res, mut pro, mut tools) = (vec![], vec![], vec![]);
    let (mut res_bytes, mut pro_bytes, mut tools_bytes, mut raw_pages) = (0, 0, 0, 0);
    for i in 0..10 + calls {
        let t0 = Instant::now();
        let (mut cursor, mut bytes, mut n) = (None::<String>, 0, 0);
        loop {
            let params = cursor.map_or(json!({}), |c| json!({"cursor": c}));
            let body = rt.block_on(mcp_raw_body(
                http,
                &url,
                &token,
                &sid,
                "resources/list",
                params,
            ));
            bytes += body.len();
            n += 1;
            cursor = next_cursor(&body);
            if cursor.is_none() {
                break;
            }
        }
        let d1 = t0.elapsed();
        let t0 = Instant::now();
        let p = rt.block_on(mcp_raw_request(
            http,
            &url,
            &token,
            &sid,
            "prompts/list",
            json!({}),
        ));
        let d2 = t0.elapsed();
        // The same apps' tools (20 each) listed on the same session: the reference.
        let t0 = Instant::now();
        let t = rt.block_on(mcp_raw_request(
            http,
            &url,
            &token,
            &sid,
            "tools/list",
            json!({}),
        ));
        let d3 = t0.elapsed();
        if i >= 10 {
            res.push(d1);
            pro.push(d2);
            tools.push(d3);
        }
        (res_bytes, pro_bytes, tools_bytes, raw_pages) = (bytes, p, t, n);
    }
    assert_eq!(raw_pages, pages, "as many pages as the parsed listing");
    let (lr, lp, lt) = (Latency::of(&res), Latency::of(&pro), Latency::of(&tools));
    progress(format!(
        "resources/list, every page ({raw_pages} pages, {listed} app resources, {} KB): p50 {:.2} ms, p99 {:.2} ms; prompts/list ({prompts} prompts, {} KB): p50 {:.2} ms, p99 {:.2} ms; tools/list of the same apps ({} KB): p50 {:.2} ms, p99 {:.2} ms (raw HTTP, not parsed)",
        res_bytes / 1024,
        lr.p50,
        lr.p99,
        pro_bytes / 1024,
        lp.p50,
        lp.p99,
        tools_bytes / 1024,
        lt.p50,
        lt.p99
    ));
    drop(running);
    s.stop();
    let mut out = vec![
        Figure::new(S, "resources_apps", apps as f64, "apps"),
        Figure::new(S, "resources_apps_down", down as f64, "apps"),
        Figure::new(S, "resources_listed", listed as f64, "res."),
        Figure::new(S, "resources_list_pages", raw_pages as f64, "pages"),
        Figure::new(S, "resources_list_kib", res_bytes as f64 / 1024.0, "KiB"),
    ];
    // The bound of `agg`'s `tools/list` (p50 ≤ 2 ms with 50 apps, 5 down), on the p50.
    let mut f: Vec<Figure> = lr
        .figures(S, "resources_list_raw", None)
        .into_iter()
        .take(2)
        .collect();
    f[0].target = Some(Target::AtMost(2.0));
    out.extend(f);
    out.push(Figure::new(S, "prompts_listed", prompts as f64, "prompts"));
    out.push(Figure::new(
        S,
        "prompts_list_kib",
        pro_bytes as f64 / 1024.0,
        "KiB",
    ));
    let mut f: Vec<Figure> = lp
        .figures(S, "prompts_list_raw", None)
        .into_iter()
        .take(2)
        .collect();
    f[0].target = Some(Target::AtMost(2.0));
    out.extend(f);
    out.extend(
        lt.figures(S, "apps_tools_list_raw", None)
            .into_iter()
            .take(2),
    );
    out
}

/// Whether a listed resource is an app's (not the vault's).
fn is_app_resource(r: &Value) -> bool {
    r["uri"].as_str().is_some_and(|u| u.starts_with("test://"))
}

/// One JSON-RPC request with its params on a raw session (as [`mcp_raw_request`]); answers the
/// answer's bytes.
async fn mcp_raw_body(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    sid: &str,
    method: &str,
    params: Value,
) -> Vec<u8> {
    let mut r = http
        .post(format!("{url}/mcp"))
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", sid)
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}))
        .send()
        .await
        .expect(method);
    assert!(r.status().is_success(), "{method}: {}", r.status());
    let sse = r
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let mut body: Vec<u8> = vec![];
    while let Some(chunk) = r.chunk().await.expect(method) {
        body.extend_from_slice(&chunk);
        if sse && body.ends_with(b"\n\n") && body.windows(8).any(|w| w == b"\"result\"") {
            break;
        }
    }
    assert!(
        body.windows(8).any(|w| w == b"\"result\""),
        "{method} answered no result: {}",
        String::from_utf8_lossy(&body[..body.len().min(300)])
    );
    body
}

/// The `result` of an answer, plain JSON or SSE events (the one that carries it).
fn result_of(body: &[u8]) -> Value {
    let text = String::from_utf8_lossy(body);
    let parse = |s: &str| serde_json::from_str::<Value>(s.trim()).ok();
    let v = if text.trim_start().starts_with('{') {
        parse(&text)
    } else {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(parse)
            .find(|v| v.get("result").is_some())
    };
    v.and_then(|mut v| v.get_mut("result").map(Value::take))
        .unwrap_or_else(|| panic!("no result in {}", &text[..text.len().min(300)]))
}

/// The `nextCursor` of a raw `resources/list` answer, found without parsing it (the cursors
/// this server gives need no escaping).
fn next_cursor(body: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"nextCursor\":\"";
    let at = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let end = body[at..].iter().position(|&c| c == b'"')?;
    Some(String::from_utf8_lossy(&body[at..at + end]).into_owned())
}
