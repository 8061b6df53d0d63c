//! Starting and stopping processes: the one start-up builder of the server ([`Launch`]), the
//! example binaries beside it ([`example`], [`App`]), signals and `/proc` figures.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `datanotes` binary: the one cargo built for this test binary, or, from an example (the
/// bench), the one beside its folder (`target/<profile>/examples/bench` ->
/// `target/<profile>/datanotes`).
pub fn bin() -> PathBuf {
    if let Some(p) = option_env!("CARGO_BIN_EXE_datanotes") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target folder");
    dir.join(format!("datanotes{}", std::env::consts::EXE_SUFFIX))
}

/// An example binary (`remote_app`), built by `cargo test` (or `cargo build --examples`) in
/// `target/<profile>/examples/`: beside this executable when it is an example, beside `deps/`
/// when it is a test. It may be missing: callers check.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("executable folder");
    let examples = if dir.file_name().is_some_and(|n| n == "examples") {
        dir.to_path_buf()
    } else {
        dir.parent().expect("target folder").join("examples")
    };
    examples.join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// Reads a child's stdout until a line starting with `prefix`; answers the rest of that line
/// (trimmed) and keeps draining stdout on a thread so that the child never blocks on it.
pub fn wait_line(child: &mut Child, prefix: &str, what: &str) -> String {
    let stdout = child.stdout.take().expect("a piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let rest = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("{what} exited before listening"))
            .unwrap_or_else(|e| panic!("read the stdout of {what}: {e}"));
        if let Some(rest) = line.strip_prefix(prefix) {
            break rest.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    rest
}

/// How to start `datanotes serve` over a folder: the one start-up builder of the tests
/// ([`crate::kit::Server`]) and the bench. `DATANOTES_LOG=warn` unless set; `--listen
/// 127.0.0.1:0` unless the arguments name `--listen`.
#[derive(Clone, Debug)]
pub struct Launch {
    bin: PathBuf,
    dir: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Where its stderr goes (with the server's default log filter), else the test's stderr.
    logs: Option<PathBuf>,
}

/// A started server: its process, its address (`http://127.0.0.1:PORT`) and its owner token.
pub struct Started {
    /// The server process.
    pub child: Child,
    /// Its base URL, as it printed it.
    pub url: String,
    /// The owner token it wrote to `.datanotes/owner-token`.
    pub token: String,
}

impl Launch {
    /// `datanotes serve --database DIR` with the binary of [`bin`].
    pub fn new(dir: &Path) -> Launch {
        Launch {
            bin: bin(),
            dir: dir.to_path_buf(),
            args: vec![],
            // No model from the user's data folder (`datanotes model install`) unless a test
            // gives one: what this machine's user installed must not change a test.
            env: vec![
                ("DATANOTES_LOG".into(), "warn".into()),
                (
                    "XDG_DATA_HOME".into(),
                    dir.with_file_name("no-user-data").display().to_string(),
                ),
            ],
            logs: None,
        }
    }

    /// Its stderr written to `file` (appended to across restarts), with the server's own
    /// default log filter (`DATANOTES_LOG` unset): what an owner's log holds.
    pub fn logs_to(mut self, file: &Path) -> Launch {
        self.env.retain(|(k, _)| k != "DATANOTES_LOG");
        self.logs = Some(file.to_path_buf());
        self
    }

    /// Another server binary.
    pub fn bin(mut self, bin: &Path) -> Launch {
        self.bin = bin.to_path_buf();
        self
    }

    /// Extra command-line arguments (`--listen ADDR` replaces `127.0.0.1:0`).
    pub fn args(mut self, args: &[&str]) -> Launch {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// An environment variable (the last value of a name wins).
    pub fn env(mut self, key: &str, value: &str) -> Launch {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Environment variables, in order.
    pub fn envs(self, env: &[(&str, &str)]) -> Launch {
        env.iter().fold(self, |l, (k, v)| l.env(k, v))
    }

    /// Spawns the server and waits until it prints the address it serves on.
    pub fn spawn(&self) -> Started {
        let listen: &[&str] = if self.args.iter().any(|a| a == "--listen") {
            &[]
        } else {
            &["--listen", "127.0.0.1:0"]
        };
        let stderr = match &self.logs {
            Some(f) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(f)
                    .expect("the server's log file"),
            ),
            None => Stdio::inherit(),
        };
        let mut cmd = Command::new(&self.bin);
        if self.logs.is_some() {
            cmd.env_remove("DATANOTES_LOG");
        }
        // A test's server has a semantic model only when the test gives it one.
        cmd.env_remove("DATANOTES_MODEL");
        let mut child = cmd
            .args(["serve", "--database"])
            .arg(&self.dir)
            .args(listen)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        let line = wait_line(&mut child, "datanotes serving ", "the server");
        let url = line.rsplit(" on ").next().unwrap().trim().to_string();
        let token = std::fs::read_to_string(self.dir.join(".datanotes/owner-token"))
            .expect("owner token")
            .trim()
            .to_string();
        Started { child, url, token }
    }
}

/// Sends a signal to a process (`libc::SIGKILL`, `libc::SIGTERM`, ...).
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) takes plain integers; a wrong pid is an error code, never UB.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// SIGKILL, no goodbye; reaps the process.
pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// SIGTERM and wait up to `within` for a clean exit, then SIGKILL.
pub fn stop(child: &mut Child, within: Duration) {
    signal(child.id(), libc::SIGTERM);
    let exited = super::poll(within, Duration::from_millis(10), || {
        matches!(child.try_wait(), Ok(Some(_))).then_some(())
    });
    if exited.is_none() {
        kill(child);
    }
}

/// A process's state, for failure messages ("exited (zombie ...)", "process state S", ...).
pub fn state(pid: u32) -> String {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(st) => match st
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
        {
            Some("Z") => "exited (zombie: it died or was killed)".into(),
            Some(x) => format!("process state {x}"),
            None => st,
        },
        Err(e) => format!("no process: {e}"),
    }
}

/// CPU time (user + system) a process has used so far, in seconds.
pub fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// A memory line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`) in MiB; `pid` may be `self`.
pub fn status_mib(pid: &str, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// A running `remote_app` example (a remote MCP app); killed on drop.
pub struct App {
    child: Option<Child>,
    args: Vec<String>,
    quiet: bool,
    /// Its MCP address, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl App {
    /// Starts the example app `name` for the engine at `engine` with its token and extra
    /// arguments, on a free port; answers once it listens (it has updated its entry by then).
    /// `quiet` sends its stderr to nowhere.
    pub fn spawn(engine: &str, name: &str, token: &str, extra: &[&str], quiet: bool) -> App {
        let mut args: Vec<String> = ["--engine", engine, "--token", token, "--name", name]
            .iter()
            .map(|x| x.to_string())
            .collect();
        args.extend(extra.iter().map(|x| x.to_string()));
        let mut app = App {
            child: None,
            args,
            quiet,
            url: String::new(),
        };
        app.listen(&["--listen", "127.0.0.1:0"]);
        app
    }

    fn listen(&mut self, listen: &[&str]) {
        let exe = example("remote_app");
        assert!(
            exe.exists(),
            "{} is missing: run `cargo test` (which builds the examples) or `cargo build --examples`",
            exe.display()
        );
        let mut child = Command::new(exe)
            .args(&self.args)
            .args(listen)
            .stdout(Stdio::piped())
            .stderr(if self.quiet {
                Stdio::null()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .expect("start remote_app");
        self.url = wait_line(&mut child, "listening on ", "remote_app");
        self.child = Some(child);
    }

    /// The `127.0.0.1:PORT` it listens on.
    pub fn addr(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_string()
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c);
        }
    }

    /// Starts again on the same port with more arguments (e.g. `--tool NAME`: other tools).
    pub fn restart_adding(&mut self, more: &[&str]) {
        self.args.extend(more.iter().map(|x| x.to_string()));
        self.restart();
    }

    /// Starts again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        let addr = self.addr();
        self.listen(&["--listen", &addr]);
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.kill();
    }
}
