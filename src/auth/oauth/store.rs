//! What the authorization server keeps across restarts, in `.datanotes/oauth.json` (0600,
//! written whole and atomically after every change): the registered clients, and the grants
//! with the hashes of their tokens. Never a token itself: a token is found by its SHA-256.
//!
//! In memory beside it: the index of live access and refresh tokens by hash, rebuilt from the
//! file at start and after every change.

use super::{Ticked, now_secs};
use crate::auth::{AppScope, Grant};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use super::bounds::MAX_CLIENTS;
/// The most access tokens alive per grant (a refresh adds one; the oldest goes first).
const MAX_ACCESS_PER_GRANT: usize = 8;
/// The most retired refresh tokens remembered per grant (to recognise a stolen one reused).
const MAX_RETIRED: usize = 32;

/// A client registered with `POST /oauth/register` (RFC 7591).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Client {
    pub client_id: String,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    /// `none`, `client_secret_post` or `client_secret_basic`.
    pub auth_method: String,
    /// The secret's SHA-256 (confidential clients).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_hash: Option<String>,
    pub registered: i64,
    /// Whether a code was ever issued to it (the owner allowed it once).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub used: bool,
}

/// A token's hash and when it expires (unix seconds).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Held {
    pub hash: String,
    pub expires: i64,
}

/// A retired refresh token: its hash and when it was replaced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Retired {
    pub hash: String,
    pub at: i64,
}

/// A grant as stored: who, what the owner ticked, and its tokens' hashes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct GrantRecord {
    pub id: String,
    pub client_id: String,
    pub client_name: String,
    /// The origin of the client's metadata document, for a client identified by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_origin: Option<String>,
    pub redirect_uri: String,
    /// The resource the tokens are for: this server's `/mcp`.
    pub resource: String,
    /// What the owner ticked (saved as `rights`).
    #[serde(rename = "rights")]
    pub consent: Ticked,
    pub created: i64,
    #[serde(default)]
    pub last_used: Option<i64>,
    /// The refresh token of the chain now.
    pub refresh: Held,
    #[serde(default)]
    pub retired: Vec<Retired>,
    #[serde(default)]
    pub access: Vec<Held>,
}

/// The file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Saved {
    #[serde(default)]
    pub clients: Vec<Client>,
    #[serde(default)]
    pub grants: Vec<GrantRecord>,
}

/// A live grant as a caller holds it.
pub(super) struct Live {
    pub grant: Arc<Grant>,
    /// When it was last used (unix seconds), kept in memory and saved with the next change.
    pub last_used: Arc<AtomicI64>,
}

/// What a token hash leads to.
#[derive(Clone)]
pub(super) enum Found {
    /// An access token of a grant, until `expires`.
    Access { grant: String, expires: i64 },
    /// The current refresh token of a grant.
    Refresh { grant: String },
    /// A refresh token the grant's chain replaced at `at`.
    Retired { grant: String, at: i64 },
}

/// The saved state and its index.
pub(super) struct Store {
    path: PathBuf,
    pub saved: Saved,
    /// Token hash (raw SHA-256) → what it is.
    pub tokens: HashMap<[u8; 32], Found>,
    /// Grant id → the caller it makes.
    pub live: HashMap<String, Live>,
}

impl Store {
    /// Reads `oauth.json` (none yet: empty). An unreadable file is an error naming it.
    pub fn open(meta_dir: &Path) -> anyhow::Result<Store> {
        let path = meta_dir.join("oauth.json");
        let saved = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                anyhow::anyhow!(
                    "{} is not a valid OAuth state file ({e}): move it away to start without clients and grants",
                    path.display()
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Saved::default(),
            Err(e) => return Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        };
        let mut s = Store {
            path,
            saved,
            tokens: HashMap::new(),
            live: HashMap::new(),
        };
        s.reindex();
        Ok(s)
    }

    /// Drops what expired, rebuilds the index, and writes the file.
    pub fn save(&mut self) -> std::io::Result<()> {
        self.reindex();
        let bytes = serde_json::to_vec_pretty(&self.saved).map_err(std::io::Error::other)?;
        crate::auth::write_private(&self.path, &bytes)
    }

    /// Rebuilds the token index and the live grants (keeping each grant's last use).
    fn reindex(&mut self) {
        let now = now_secs();
        self.saved.grants.retain(|g| g.refresh.expires > now);
        let mut tokens = HashMap::new();
        let mut live = HashMap::new();
        for g in &mut self.saved.grants {
            g.access.retain(|a| a.expires > now);
            while g.access.len() > MAX_ACCESS_PER_GRANT {
                g.access.remove(0);
            }
            while g.retired.len() > MAX_RETIRED {
                g.retired.remove(0);
            }
            let key = |h: &str| -> Option<[u8; 32]> { hex::decode(h).ok()?.try_into().ok() };
            for a in &g.access {
                if let Some(k) = key(&a.hash) {
                    tokens.insert(
                        k,
                        Found::Access {
                            grant: g.id.clone(),
                            expires: a.expires,
                        },
                    );
                }
            }
            if let Some(k) = key(&g.refresh.hash) {
                tokens.insert(
                    k,
                    Found::Refresh {
                        grant: g.id.clone(),
                    },
                );
            }
            for r in &g.retired {
                if let Some(k) = key(&r.hash) {
                    tokens.insert(
                        k,
                        Found::Retired {
                            grant: g.id.clone(),
                            at: r.at,
                        },
                    );
                }
            }
            let last_used = match self.live.remove(&g.id) {
                Some(l) => {
                    let t = l.last_used.load(Ordering::Relaxed);
                    if t > 0 {
                        g.last_used = Some(t);
                    }
                    l.last_used
                }
                None => Arc::new(AtomicI64::new(g.last_used.unwrap_or(0))),
            };
            let grant = Arc::new(Grant {
                id: g.id.clone(),
                client: g.client_name.clone(),
                resource: g.resource.clone(),
                tool_listing: g.consent.tool_listing,
                pinned_tools: g.consent.pinned_tools.clone(),
                scope: AppScope {
                    name: g.client_name.clone(),
                    rights: g.consent.rights.clone(),
                    call_tools: g.consent.call_tools.clone(),
                    read: Some(g.consent.reads()),
                },
            });
            live.insert(g.id.clone(), Live { grant, last_used });
        }
        self.tokens = tokens;
        self.live = live;
    }

    /// The grant of this id.
    pub fn grant_mut(&mut self, id: &str) -> Option<&mut GrantRecord> {
        self.saved.grants.iter_mut().find(|g| g.id == id)
    }

    /// Removes a grant and every token of its chain; whether it was there.
    pub fn revoke(&mut self, id: &str) -> bool {
        let before = self.saved.grants.len();
        self.saved.grants.retain(|g| g.id != id);
        before != self.saved.grants.len()
    }

    /// A registered client.
    pub fn client(&self, id: &str) -> Option<&Client> {
        self.saved.clients.iter().find(|c| c.client_id == id)
    }

    /// Whether a grant of this client is alive.
    pub fn granted(&self, client_id: &str) -> bool {
        self.saved.grants.iter().any(|g| g.client_id == client_id)
    }

    /// Adds a client. At [`MAX_CLIENTS`], the oldest one registered over
    /// [`UNUSED_AFTER`](super::bounds::UNUSED_AFTER) ago and never used (no grant, no code ever
    /// issued, no request in `waiting` for the owner) makes room; if there is none, nothing is
    /// added and the answer is how long until one may (seconds).
    pub fn add_client(&mut self, c: Client, waiting: &HashSet<String>) -> Result<(), u64> {
        use super::bounds::UNUSED_AFTER;
        while self.saved.clients.len() >= MAX_CLIENTS {
            let now = now_secs();
            let oldest = self
                .saved
                .clients
                .iter()
                .enumerate()
                .filter(|(_, c)| {
                    !c.used && !waiting.contains(&c.client_id) && !self.granted(&c.client_id)
                })
                .min_by_key(|(_, c)| c.registered)
                .map(|(i, c)| (i, now - c.registered));
            match oldest {
                Some((i, age)) if age > UNUSED_AFTER => {
                    self.saved.clients.remove(i);
                }
                Some((_, age)) => return Err((UNUSED_AFTER - age).max(1) as u64),
                None => return Err(UNUSED_AFTER as u64),
            }
        }
        self.saved.clients.push(c);
        Ok(())
    }

    /// Notes that a code was issued to a registered client, and saves it: it is used.
    pub fn note_used(&mut self, client_id: &str) {
        let Some(c) = self
            .saved
            .clients
            .iter_mut()
            .find(|c| c.client_id == client_id && !c.used)
        else {
            return;
        };
        c.used = true;
        if let Err(e) = self.save() {
            tracing::warn!("cannot save the OAuth clients: {e}");
        }
    }

    /// Retires a grant's refresh token for a new one, and adds an access token.
    pub fn rotate(&mut self, id: &str, refresh: Held, access: Held) {
        let now = now_secs();
        if let Some(g) = self.grant_mut(id) {
            let old = std::mem::replace(&mut g.refresh, refresh);
            g.retired.push(Retired {
                hash: old.hash,
                at: now,
            });
            g.access.push(access);
        }
    }
}
