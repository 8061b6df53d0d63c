//! What the registry answers a request, by its [`Mode`](super::Mode): `/v2/`, a sign-in,
//! manifests and blobs (honest, endless, huge, redirected), or a hang.

use super::artifact::Blob;
use super::http::{head, respond, send, sign_in};
use super::server::State;
use super::{HUGE_DECLARED, MANIFEST_TYPE};
use std::net::TcpStream;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

pub(super) fn registry_answer(st: &State, c: &mut TcpStream, method: &str, path: &str) {
    st.requests.fetch_add(1, SeqCst);
    if st.hang {
        // Hangs until the registry is dropped (a day at most: longer than any test).
        let day = Duration::from_secs(86_400);
        super::super::poll(day, Duration::from_millis(50), || {
            st.stop.load(SeqCst).then_some(())
        });
        return;
    }
    if let Some(realm) = &st.sign_in {
        return sign_in(c, method, realm, "hostile");
    }
    if let Some(second) = &st.second_realm {
        let json = ("content-type", "application/json");
        if path.starts_with("/token") {
            return respond(c, method, 200, &[json], br#"{"token": "t"}"#);
        }
        if path == "/v2/" || path == "/v2" {
            let realm = match st.challenges.fetch_add(1, SeqCst) {
                0 => format!("http://127.0.0.1:{}/token", st.port.load(SeqCst)),
                _ => second.clone(),
            };
            return sign_in(c, method, &realm, "twice");
        }
    }
    if path == "/v2/" || path == "/v2" {
        return respond(
            c,
            method,
            200,
            &[("content-type", "application/json")],
            b"{}",
        );
    }
    let Some(rest) = path.strip_prefix("/v2/") else {
        return not_found(c, method, "NAME_UNKNOWN");
    };
    if let Some((_repo, reference)) = rest.rsplit_once("/manifests/") {
        if method == "GET" {
            st.manifest_gets.fetch_add(1, SeqCst);
        }
        let arts = st.artifacts.lock().unwrap();
        let found = if reference.starts_with("sha256:") {
            arts.iter().find(|a| a.digest == reference)
        } else {
            arts.first()
        };
        let Some(a) = found else {
            drop(arts);
            return not_found(c, method, "MANIFEST_UNKNOWN");
        };
        let (body, digest) = (a.manifest.clone(), a.digest.clone());
        drop(arts);
        if st.endless_manifest && method == "GET" {
            let chunked = [
                ("content-type", MANIFEST_TYPE),
                ("docker-content-digest", digest.as_str()),
                ("transfer-encoding", "chunked"),
            ];
            return stream_forever(st, c, head(200, &chunked, None), true);
        }
        return respond(
            c,
            method,
            200,
            &[
                ("content-type", MANIFEST_TYPE),
                ("docker-content-digest", &digest),
            ],
            &body,
        );
    }
    if let Some((_repo, digest)) = rest.rsplit_once("/blobs/") {
        if method == "GET" {
            st.blob_gets.fetch_add(1, SeqCst);
        }
        let arts = st.artifacts.lock().unwrap();
        let blob = arts
            .iter()
            .flat_map(|a| a.blobs.iter())
            .find(|(d, _)| d == digest)
            .map(|(_, b)| match b {
                Blob::Bytes(v) => Blob::Bytes(v.clone()),
                Blob::Endless => Blob::Endless,
                Blob::Huge => Blob::Huge,
                Blob::Redirect(u) => Blob::Redirect(u.clone()),
            });
        drop(arts);
        let digest_h = ("docker-content-digest", digest);
        let octets = ("content-type", "application/octet-stream");
        match blob {
            None => not_found(c, method, "BLOB_UNKNOWN"),
            Some(Blob::Redirect(url)) => {
                respond(c, method, 302, &[("location", &url)], b"");
            }
            Some(Blob::Bytes(v)) => {
                let head = head(200, &[octets, digest_h], Some(v.len() as u64));
                if send(c, head.as_bytes(), &st.stop) && method == "GET" && send(c, &v, &st.stop) {
                    st.blob_bytes.fetch_add(v.len() as u64, SeqCst);
                }
            }
            Some(blob @ (Blob::Endless | Blob::Huge)) => {
                let endless = matches!(blob, Blob::Endless);
                let head = if endless {
                    head(
                        200,
                        &[octets, digest_h, ("transfer-encoding", "chunked")],
                        None,
                    )
                } else {
                    head(200, &[octets, digest_h], Some(HUGE_DECLARED))
                };
                if method == "GET" {
                    stream_forever(st, c, head, endless);
                }
            }
        }
        return;
    }
    not_found(c, method, "UNSUPPORTED")
}

/// Sends `head`, then bytes until the client hangs up: chunked, or plain (under a length the
/// head declared), counted in `blob_bytes` while `streaming`.
fn stream_forever(st: &State, c: &mut TcpStream, head: String, chunked: bool) {
    if !send(c, head.as_bytes(), &st.stop) {
        return;
    }
    st.streaming.fetch_add(1, SeqCst);
    let chunk = vec![b'x'; 64 << 10];
    let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
    framed.extend_from_slice(&chunk);
    framed.extend_from_slice(b"\r\n");
    let out = if chunked { &framed } else { &chunk };
    while send(c, out, &st.stop) {
        st.blob_bytes.fetch_add(chunk.len() as u64, SeqCst);
    }
    st.streaming.fetch_sub(1, SeqCst);
}

fn not_found(c: &mut TcpStream, method: &str, code: &str) {
    let body = format!("{{\"errors\":[{{\"code\":\"{code}\",\"message\":\"not here\"}}]}}");
    respond(
        c,
        method,
        404,
        &[("content-type", "application/json")],
        body.as_bytes(),
    );
}
