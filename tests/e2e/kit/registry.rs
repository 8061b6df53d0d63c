//! [`Registry`]: a real OCI registry (CNCF distribution 2.8, Debian's `docker-registry`) on
//! 127.0.0.1 over a temporary folder, and the real client that publishes components to it
//! (`wkg oci push`). Both are installed under `target/oci-tools/` by `scripts/fetch-oci-tools`,
//! run once per test run (it does nothing when they are there).

use super::process;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `target/oci-tools/`, installed (or checked) once per test run.
pub fn oci_tools() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| super::installed("fetch-oci-tools", &[]).remove(0))
        .clone()
}

/// A running `docker-registry serve` on `127.0.0.1:PORT`, its storage in a temporary folder.
/// Killed on drop; [`Registry::stop`] and [`Registry::start_again`] stop it and start it again
/// on the same port over the same storage.
pub struct Registry {
    child: Option<Child>,
    port: u16,
    tmp: tempfile::TempDir,
    /// The user and password its htpasswd file holds, when it asks for a login.
    login: Option<(String, String)>,
}

impl Registry {
    /// A registry that anyone may pull from and push to.
    pub fn start() -> Registry {
        Registry::start_opts(None)
    }

    /// A registry that asks for a login (HTTP basic over plain HTTP, an htpasswd file with a
    /// bcrypt hash).
    pub fn start_with_login(user: &str, pass: &str) -> Registry {
        let line = bcrypt_line(user, pass);
        Registry::start_opts(Some((user.to_string(), pass.to_string(), line)))
    }

    fn start_opts(login: Option<(String, String, String)>) -> Registry {
        let tmp = tempfile::tempdir().expect("tempdir");
        if let Some((_, _, line)) = &login {
            std::fs::write(tmp.path().join("htpasswd"), format!("{line}\n")).unwrap();
        }
        let mut r = Registry {
            child: None,
            port: 0,
            tmp,
            login: login.map(|(u, p, _)| (u, p)),
        };
        // The registry has no port-0 mode: take a free port, release it, and try another one if
        // somebody else took it in between.
        for _ in 0..10 {
            r.port = free_port();
            r.write_config();
            match r.spawn() {
                Ok(()) => return r,
                Err(log) if log.contains("address already in use") => continue,
                Err(log) => panic!("docker-registry did not start:\n{log}"),
            }
        }
        panic!("docker-registry found no free port in 10 tries");
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The source of `repo:tag` (or `repo@sha256:...`) on this registry: `oci://127.0.0.1:PORT/...`.
    pub fn reference(&self, repo_tag: &str) -> String {
        format!("oci://{}/{repo_tag}", self.addr())
    }

    /// The source of `repo` pinned by a digest: `oci://127.0.0.1:PORT/repo@sha256:...`.
    pub fn pinned(&self, repo: &str, digest: &str) -> String {
        format!("oci://{}/{repo}@{digest}", self.addr())
    }

    /// The user and password it asks for, if any.
    pub fn login(&self) -> Option<(&str, &str)> {
        self.login.as_ref().map(|(u, p)| (u.as_str(), p.as_str()))
    }

    /// Publishes a component as `repo:tag` with the real client (`wkg oci push`), with manifest
    /// annotations; answers the manifest digest it printed (`sha256:...`).
    pub fn push(&self, repo_tag: &str, wasm: &Path, annotations: &[(&str, &str)]) -> String {
        let home = self.tmp.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut cmd = Command::new(oci_tools().join("bin/wkg"));
        cmd.args(["oci", "push", "--insecure", &self.addr()]);
        if let Some((u, p)) = self.login() {
            cmd.args(["-u", u, "-p", p]);
        }
        cmd.arg(format!("{}/{repo_tag}", self.addr())).arg(wasm);
        for (k, v) in annotations {
            cmd.arg("--annotation").arg(format!("{k}={v}"));
        }
        // Its own home: wkg reads (and may write) its configuration and caches there.
        let out = cmd
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env_remove("WKG_OCI_USERNAME")
            .env_remove("WKG_OCI_PASSWORD")
            .env_remove("WKG_OCI_INSECURE")
            .output()
            .expect("run wkg");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "wkg oci push {repo_tag} {} failed:\n{stdout}\n{}",
            wasm.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("digest:"))
            .map(|d| d.trim().to_string())
            .unwrap_or_else(|| panic!("wkg printed no digest: {stdout}"))
    }

    /// Stops it (SIGKILL); the storage stays.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            process::kill(&mut c);
        }
    }

    /// Starts it again on the same port over the same storage.
    pub fn start_again(&mut self) {
        self.stop();
        if let Err(log) = self.spawn() {
            panic!(
                "docker-registry did not start again on {}:\n{log}",
                self.addr()
            );
        }
    }

    fn write_config(&self) {
        let dir = self.tmp.path();
        let mut yml = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {}\n  secret: test-only\n",
            dir.join("storage").display(),
            self.addr()
        );
        if self.login.is_some() {
            yml.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: datanotes-test\n    path: {}\n",
                dir.join("htpasswd").display()
            ));
        }
        std::fs::write(dir.join("config.yml"), yml).unwrap();
    }

    /// Spawns it and waits until `GET /v2/` answers 200 (10 s); `Err(log)` if it exits or never
    /// answers.
    fn spawn(&mut self) -> Result<(), String> {
        let dir = self.tmp.path();
        let log_path = dir.join("registry.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let mut child = Command::new(oci_tools().join("docker-registry"))
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn target/oci-tools/docker-registry");
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let url = format!("http://{}/v2/", self.addr());
        let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        // Up: it answers GET /v2/; or it exited.
        let up = super::poll(Duration::from_secs(10), Duration::from_millis(10), || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(format!("(exited: {status})\n{}", read_log())));
            }
            let mut req = http.get(&url);
            if let Some((u, p)) = self.login() {
                req = req.basic_auth(u, Some(p));
            }
            req.send()
                .is_ok_and(|r| r.status() == 200)
                .then_some(Ok(()))
        });
        match up {
            Some(Ok(())) => {
                self.child = Some(child);
                Ok(())
            }
            Some(Err(e)) => Err(e),
            None => {
                process::kill(&mut child);
                Err(format!("(no answer to GET /v2/ in 10 s)\n{}", read_log()))
            }
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port free on 127.0.0.1 a moment ago.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// An htpasswd line `user:$2b$...` (bcrypt, which is all the registry reads; the lowest cost,
/// for speed).
fn bcrypt_line(user: &str, pass: &str) -> String {
    let hash = bcrypt::hash(pass, 4).expect("bcrypt hash");
    format!("{user}:{hash}")
}
