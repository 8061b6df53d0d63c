//! [`HostileRegistry`]: started in a [`Mode`] on a free port, stopped on drop; what its
//! connections share, and what it counts.

use super::answer::registry_answer;
use super::artifact::{Artifact, Blob, artifact, honest};
use super::http::{listen, shut};
use super::{ENDLESS_DECLARED, HUGE_DECLARED, Mode, digest_of};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// What the connections share.
pub(super) struct State {
    /// The artifacts, the current one (the tag's) first.
    pub(super) artifacts: Mutex<Vec<Artifact>>,
    /// The second artifact of a moving tag, taken by `move_tag`.
    next: Mutex<Option<Artifact>>,
    pub(super) hang: bool,
    pub(super) endless_manifest: bool,
    pub(super) sign_in: Option<String>,
    /// The realm of [`Mode::SignInTwice`]'s later challenges.
    pub(super) second_realm: Option<String>,
    pub(super) challenges: AtomicU64,
    pub(super) port: AtomicU64,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) requests: AtomicU64,
    pub(super) manifest_gets: AtomicU64,
    pub(super) blob_gets: AtomicU64,
    pub(super) blob_bytes: AtomicU64,
    pub(super) streaming: AtomicU64,
}

/// The registry (stopped on drop).
pub struct HostileRegistry {
    port: u16,
    state: Arc<State>,
}

impl HostileRegistry {
    /// Starts it on a free port of 127.0.0.1.
    pub fn start(mode: Mode) -> HostileRegistry {
        HostileRegistry::start_annotated(mode, &[])
    }

    /// Starts it with these manifest annotations (e.g. `dev.datanotes.app`).
    pub fn start_annotated(mode: Mode, annotations: &[(&str, &str)]) -> HostileRegistry {
        let ann: Vec<(String, String)> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut next = None;
        let mut hang = false;
        let mut endless_manifest = false;
        let mut sign_in = None;
        let mut second_realm = None;
        let artifacts = match mode {
            Mode::Honest(b) => vec![honest(&b, &ann)],
            Mode::LyingSize(b) => vec![artifact(&digest_of(&b), 1000, Blob::Bytes(b), &ann)],
            Mode::EndlessBlob => vec![artifact(
                &digest_of(b"endless"),
                ENDLESS_DECLARED,
                Blob::Endless,
                &ann,
            )],
            Mode::HugeBlob => vec![artifact(
                &digest_of(b"huge"),
                HUGE_DECLARED,
                Blob::Huge,
                &ann,
            )],
            Mode::Hang => {
                hang = true;
                vec![]
            }
            Mode::RedirectBlob(b, url) => {
                vec![artifact(
                    &digest_of(&b),
                    b.len() as u64,
                    Blob::Redirect(url),
                    &ann,
                )]
            }
            Mode::NotAComponent => {
                let junk: Vec<u8> = (0..4096).map(|_| rand::random::<u8>()).collect();
                vec![honest(&junk, &ann)]
            }
            Mode::MalformedManifest => {
                let manifest = b"{\"schemaVersion\": 2, \"layers\": [{\"mediaType\": ".to_vec();
                vec![Artifact {
                    digest: digest_of(&manifest),
                    manifest,
                    blobs: vec![],
                }]
            }
            Mode::MovingTag(a, b) => {
                next = Some(honest(&b, &ann));
                vec![honest(&a, &ann)]
            }
            Mode::SignInAt(realm) => {
                sign_in = Some(realm);
                vec![]
            }
            Mode::SignInTwice(b, realm) => {
                second_realm = Some(realm);
                vec![honest(&b, &ann)]
            }
            Mode::EndlessManifest => {
                endless_manifest = true;
                vec![Artifact {
                    digest: digest_of(b"an endless manifest"),
                    manifest: b"{}".to_vec(),
                    blobs: vec![],
                }]
            }
        };
        let state = Arc::new(State {
            artifacts: Mutex::new(artifacts),
            next: Mutex::new(next),
            hang,
            endless_manifest,
            sign_in,
            second_realm,
            challenges: AtomicU64::new(0),
            port: AtomicU64::new(0),
            stop: Arc::default(),
            requests: AtomicU64::new(0),
            manifest_gets: AtomicU64::new(0),
            blob_gets: AtomicU64::new(0),
            blob_bytes: AtomicU64::new(0),
            streaming: AtomicU64::new(0),
        });
        let st = state.clone();
        let port = listen(state.stop.clone(), move |c, method, path| {
            registry_answer(&st, c, method, path)
        });
        state.port.store(port.into(), SeqCst);
        HostileRegistry { port, state }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:PORT/<repo_tag>`.
    pub fn reference(&self, repo_tag: &str) -> String {
        format!("oci://{}/{repo_tag}", self.addr())
    }

    /// The digest the tag names now (`None` in the modes that serve no manifest).
    pub fn digest(&self) -> Option<String> {
        self.state
            .artifacts
            .lock()
            .unwrap()
            .first()
            .map(|a| a.digest.clone())
    }

    /// A moving tag now names its second component.
    pub fn move_tag(&self) {
        let b = self
            .state
            .next
            .lock()
            .unwrap()
            .take()
            .expect("a moving tag, not moved yet");
        self.state.artifacts.lock().unwrap().insert(0, b);
    }

    /// Requests received (every connection that sent a request head).
    pub fn requests(&self) -> u64 {
        self.state.requests.load(SeqCst)
    }

    /// The `/v2/` challenges sent ([`Mode::SignInTwice`]).
    pub fn challenges(&self) -> u64 {
        self.state.challenges.load(SeqCst)
    }

    /// `GET` of a manifest.
    pub fn manifest_gets(&self) -> u64 {
        self.state.manifest_gets.load(SeqCst)
    }

    /// `GET` of a blob.
    pub fn blob_gets(&self) -> u64 {
        self.state.blob_gets.load(SeqCst)
    }

    /// The bytes of blob bodies written to clients so far.
    pub fn blob_bytes_sent(&self) -> u64 {
        self.state.blob_bytes.load(SeqCst)
    }

    /// Blob bodies being written now (an endless or huge one whose client has not hung up).
    pub fn streaming(&self) -> u64 {
        self.state.streaming.load(SeqCst)
    }
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        shut(&self.state.stop, self.port);
    }
}
