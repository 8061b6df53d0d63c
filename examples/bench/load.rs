//! `load`: the big table written as files while the server is stopped, and the first start
//! that indexes them all.

use super::*;

/// Creates the table through the server, then writes the row files straight into its folder
/// while the server is stopped (the format `render_row` writes), and measures the first start,
/// which finds them all as hand edits.
pub(crate) fn section_load(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "load";
    let s = b.server();
    s.call(
        "create_table",
        json!({"table": TABLE, "description": "bench rows", "columns": {
            "title": {"type": "text", "required": true},
            "status": {"type": "enum", "values": STATUSES, "default": "todo"},
            "owner": {"type": "text"},
            "estimate": {"type": "integer", "min": 0, "max": 100},
            "due": {"type": "date"},
            "tags": {"type": "list"},
        }}),
    );
    b.stop();
    let dir = files::table_dir(&b.dir, TABLE);
    let def = std::fs::read_to_string(dir.join(files::TABLE_FILE)).expect("table definition");
    let table = Table::compile(
        TABLE,
        files::parse_table_def(&def).expect("definition parses"),
    )
    .expect("definition compiles");
    progress(format!("writing {} row files", b.opts.rows));
    let t0 = Instant::now();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut bytes_total = 0usize;
    for i in 0..b.opts.rows {
        let (values, body) = row_values(&mut rng, i);
        let values = table.check_row(&values).expect("generated row is valid");
        let bytes = files::render_row(&table, &values, &body);
        bytes_total += bytes.len();
        std::fs::write(dir.join(format!("r{i:07}.md")), bytes).expect("write row file");
    }
    let write_s = t0.elapsed().as_secs_f64();
    progress(format!("first start over {} new files", b.opts.rows));
    let s = b.server();
    let first = s.started_in.as_secs_f64();
    let cpu = s.cpu_s();
    let rss = s.peak_rss_mib();
    let d = s.call("describe_table", json!({"table": TABLE}));
    let rows = d["rows"].as_i64().unwrap_or(-1);
    assert_eq!(rows as usize, b.opts.rows, "every file is indexed: {d}");
    assert_eq!(d["invalid"], json!([]), "no invalid rows");
    progress(format!(
        "first start {first:.2} s (server CPU {cpu:.2} s), peak RSS {rss:.0} MiB, {rows} rows"
    ));
    vec![
        Figure::new(S, "rows", b.opts.rows as f64, "rows"),
        Figure::new(S, "row_files_mib", bytes_total as f64 / 1048576.0, "MiB"),
        Figure::new(S, "write_files_s", write_s, "s"),
        Figure::new(S, "first_start_s", first, "s"),
        Figure::new(S, "first_start_cpu_s", cpu, "s"),
        Figure::new(S, "first_start_peak_rss_mib", rss, "MiB"),
    ]
}
