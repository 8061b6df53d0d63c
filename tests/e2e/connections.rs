//! The listener under hostile load: thousands of idle TCP connections (no token, no bytes) are
//! capped and closed after their timeouts, while `/datanotes/health` and writes keep answering.

use crate::kit::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Raises this process's soft limit of open files (the test holds thousands of sockets);
/// answers it.
fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
    }
    r.rlim_cur
}

/// One request on a fresh connection (`Connection: close`); answers the status and how long
/// the whole exchange took.
fn raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, Duration) {
    let t = Instant::now();
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        c,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).expect("read the answer");
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, t.elapsed())
}

/// Whether the server closed this connection (EOF or reset), without waiting.
fn closed(mut c: &TcpStream) -> bool {
    c.set_nonblocking(true).unwrap();
    let mut b = [0u8; 64];
    match c.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

/// The server's open sockets (its listener and connections).
fn open_sockets(s: &Server) -> usize {
    let pid = s.child.as_ref().unwrap().id();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        })
        .count()
}

fn open_fds(s: &Server) -> usize {
    let pid = s.child.as_ref().unwrap().id();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[test]
fn idle_connections_are_capped_and_closed_while_health_and_writes_answer() {
    let files = raise_nofile();
    let s = Server::start_with_env(&[
        ("DATANOTES_MAX_CONNECTIONS", "500"),
        ("DATANOTES_HEADER_TIMEOUT_MS", "1500"),
        ("DATANOTES_IDLE_TIMEOUT_MS", "3000"),
    ]);
    create_tasks(&s);
    let addr: SocketAddr = s.url.trim_start_matches("http://").parse().unwrap();
    let fds0 = open_fds(&s);

    // A keep-alive connection that asked once, then idles: closed after the idle timeout.
    let mut kept = TcpStream::connect(addr).unwrap();
    write!(kept, "GET /datanotes/health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut b = [0u8; 512];
    let n = kept.read(&mut b).unwrap();
    assert!(String::from_utf8_lossy(&b[..n]).starts_with("HTTP/1.1 200"));

    // Thousands of connections that say nothing.
    let n = 3000.min(files.saturating_sub(300) as usize);
    let started = Instant::now();
    let idle: Vec<TcpStream> = (0..n)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok())
        .collect();
    eprintln!(
        "{} idle connections opened in {:?}",
        idle.len(),
        started.elapsed()
    );
    assert!(idle.len() > n / 2, "only {} of {n} connected", idle.len());

    // Health and a write still answer (a hang guard of 5 s each: how fast is the benchmark's).
    for i in 0..5 {
        let (st, took) = raw(addr, "GET", "/datanotes/health", None, "");
        assert_eq!(st, 200);
        assert!(took < Duration::from_secs(5), "health took {took:?}");
        let body = format!(r#"{{"table": "{TASKS}", "values": {{"title": "under load {i}"}}}}"#);
        let (st, took) = raw(
            addr,
            "POST",
            "/datanotes/insert_row/",
            Some(&s.token),
            &body,
        );
        assert_eq!(st, 200);
        assert!(took < Duration::from_secs(5), "insert took {took:?}");
    }
    // The server holds at most its cap (and the reserve) of them.
    let fds = open_fds(&s);
    eprintln!("server file descriptors: {fds0} before, {fds} with the idle connections");
    assert!(fds < fds0 + 500 + 32 + 50, "{fds} open");

    // Past the header timeout every idle connection is closed; past the idle timeout, the
    // keep-alive one too.
    eventually_ok("every idle connection closed", || {
        let still = idle.iter().filter(|c| !closed(c)).count();
        match (still, closed(&kept)) {
            (0, true) => Ok(()),
            (n, k) => Err(format!(
                "{n} idle still open; the keep-alive one closed: {k}"
            )),
        }
    });
    let still = idle.iter().filter(|c| !closed(c)).count();
    assert_eq!(still, 0, "{still} idle connections still open");
    assert!(
        closed(&kept),
        "the idle keep-alive connection is still open"
    );
    assert!(open_fds(&s) < fds0 + 20);
    assert_eq!(raw(addr, "GET", "/datanotes/health", None, "").0, 200);
}

#[test]
fn at_the_cap_with_every_connection_busy_health_and_the_owner_still_get_through() {
    let s = Server::start_with_env(&[("DATANOTES_MAX_CONNECTIONS", "4")]);
    let addr: SocketAddr = s.url.trim_start_matches("http://").parse().unwrap();
    let sockets0 = open_sockets(&s);
    // Four long polls hold every connection with a request in flight.
    let polls: Vec<_> = (0..4)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            let body = r#"{"since": 1000000, "wait_ms": 5000}"#;
            write!(
                c,
                "POST /datanotes/changes/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n\r\n{body}",
                s.token,
                body.len()
            )
            .unwrap();
            c
        })
        .collect();
    // Once the server holds them (its sockets; other files it opens meanwhile do not count),
    // an anonymous request is told the server is busy. Until it has accepted all four, such a
    // request may still find a free connection, so this is waited for.
    eventually_ok("the server holds the 4 connections", || {
        let n = open_sockets(&s);
        if n >= sockets0 + 4 {
            Ok(())
        } else {
            Err(format!("{n} sockets, {sockets0} before"))
        }
    });
    eventually_ok(
        "an anonymous request is told the server is busy",
        || match raw(addr, "POST", "/datanotes/list_tables/", None, "{}").0 {
            503 => Ok(()),
            st => Err(format!("answered {st}")),
        },
    );
    // Health and the owner get through.
    let (st, took) = raw(addr, "GET", "/datanotes/health", None, "");
    assert_eq!(st, 200);
    // Well before the polls' 5 s: it did not wait for a connection to free up.
    assert!(took < Duration::from_secs(3), "{took:?}");
    let (st, _) = raw(
        addr,
        "POST",
        "/datanotes/list_tables/",
        Some(&s.token),
        "{}",
    );
    assert_eq!(st, 200);
    drop(polls);
}

/// The soft and hard limits of open files of a process (`/proc/PID/limits`).
fn nofile_of(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files");
    let mut f = line["Max open files".len()..].split_whitespace();
    (f.next().unwrap().into(), f.next().unwrap().into())
}

#[test]
fn serve_raises_its_open_files_limit_to_the_hard_one() {
    // Started under a low soft limit (the hard one as this process has it).
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("low-nofile.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nulimit -Sn 256 || exit 1\nexec '{}' \"$@\"\n",
            bin().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir(&db).unwrap();
    let mut started = Launch::new(&db).bin(&script).spawn();
    let (soft, hard) = nofile_of(started.child.id());
    let _ = started.child.kill();
    let _ = started.child.wait();
    assert_eq!(
        soft, hard,
        "the server's open files limit: soft {soft}, hard {hard}"
    );
    assert_ne!(soft, "256");
}

/// The time slice (`se.slice`, ns) of each thread of `pid` named `name`, from
/// `/proc/PID/task/*/sched`; empty where the kernel does not show it.
fn slices_of(pid: u32, name: &str) -> Vec<u64> {
    let mut out = vec![];
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let sched = std::fs::read_to_string(t.path().join("sched")).unwrap_or_default();
        let slice = sched
            .lines()
            .find(|l| l.starts_with("se.slice"))
            .and_then(|l| l.rsplit(':').next())
            .and_then(|v| v.trim().parse::<u64>().ok());
        out.extend(slice);
    }
    out
}

/// Whether this kernel takes a custom time slice from `sched_setattr` (Linux 6.12 and later).
fn custom_slices() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 12)
}

#[test]
fn the_servers_request_threads_ask_for_a_short_time_slice() {
    let dir = tempfile::tempdir().unwrap();
    if !custom_slices() {
        // Older kernels refuse a custom slice (the unit test of `start::short_slice` checks
        // that nothing changes then): the server starts and answers all the same.
        let s = Server::start_in(dir.path());
        s.ok("list_tables", serde_json::json!({}));
        return;
    }
    // The threads' slices once `ready` holds (a thread names itself and takes its slice when
    // it first runs, which on a loaded machine may come after the server answers), or after
    // 10 s.
    let slices = |env: &[(&str, &str)], ready: &dyn Fn(&[u64], &[u64]) -> bool| {
        let mut started = Launch::new(dir.path()).envs(env).spawn();
        let pid = started.child.id();
        let mut r = (vec![], vec![]);
        let every = std::time::Duration::from_millis(20);
        poll(std::time::Duration::from_secs(10), every, || {
            r = (
                slices_of(pid, "tokio-rt-worker"),
                slices_of(pid, "datanotes-write"),
            );
            ready(&r.0, &r.1).then_some(())
        });
        let _ = started.child.kill();
        let _ = started.child.wait();
        r
    };
    // By default the request threads take the kernel's least slice (100 µs); the writer keeps
    // the kernel's own, so that a request preempts it.
    let (workers, writer) = slices(&[], &|w, d| {
        !d.is_empty() && !w.is_empty() && w.iter().all(|&s| s == 100_000)
    });
    assert!(!workers.is_empty(), "no tokio worker thread found");
    assert!(!writer.is_empty(), "no writer thread found");
    assert!(
        workers.iter().all(|&s| s == 100_000),
        "workers' slices: {workers:?}"
    );
    assert!(
        writer.iter().all(|&s| s > 100_000),
        "writer's slice: {writer:?}"
    );
    // `DATANOTES_SLICE_US=0` leaves them the kernel's.
    let (workers, _) = slices(&[("DATANOTES_SLICE_US", "0")], &|w, _| !w.is_empty());
    assert!(!workers.is_empty(), "no tokio worker thread found");
    assert!(
        workers.iter().all(|&s| s > 100_000),
        "workers' slices: {workers:?}"
    );
}
