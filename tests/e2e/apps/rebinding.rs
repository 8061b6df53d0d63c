//! DNS rebinding against the engine's outbound connections, through a real server and a real
//! DNS server (`DATANOTES_DNS`, UDP on 127.0.0.1) that answers a public address to the first
//! question about a name and `127.0.0.1` to every later one: the engine must check the address
//! again when it connects, and never reach what listens on loopback: a remote app, an OAuth
//! client metadata document, a registry's sign-in, a registry's redirect of a blob.

use crate::kit::fake_app::{initialized, rpc, serve_seeing};
use crate::kit::oauth;
use crate::kit::*;
use serde_json::{Value, json};
use simple_dns::rdata::{A, RData};
use simple_dns::{CLASS, Packet, QTYPE, ResourceRecord, TYPE};
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A DNS server on 127.0.0.1 that answers `A` questions with `first` once, then with
/// `then`; `AAAA` questions with no address. It keeps the addresses it answered, in order.
struct Rebinder {
    addr: String,
    answered: Arc<Mutex<Vec<Ipv4Addr>>>,
}

impl Rebinder {
    fn start(first: Ipv4Addr, then: Ipv4Addr) -> Rebinder {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap().to_string();
        let answered = Arc::new(Mutex::new(vec![]));
        let log = answered.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                let Ok(q) = Packet::parse(&buf[..n]) else {
                    continue;
                };
                let mut reply = Packet::new_reply(q.id());
                for question in &q.questions {
                    reply.questions.push(question.clone());
                    if question.qtype == QTYPE::TYPE(TYPE::A) {
                        let mut log = log.lock().unwrap();
                        let ip = if log.is_empty() { first } else { then };
                        log.push(ip);
                        reply.answers.push(ResourceRecord::new(
                            question.qname.clone(),
                            CLASS::IN,
                            0,
                            RData::A(A {
                                address: u32::from(ip),
                            }),
                        ));
                    }
                }
                if let Ok(bytes) = reply.build_bytes_vec() {
                    let _ = socket.send_to(&bytes, from);
                }
            }
        });
        Rebinder { addr, answered }
    }
}

#[test]
fn a_name_that_rebinds_to_loopback_after_the_check_is_never_reached() {
    // The app that would answer, on loopback, counting every request it gets.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let reached = Arc::new(AtomicUsize::new(0));
    let seen = reached.clone();
    let url = serve_seeing(
        &rt,
        Arc::new(move |_, v: Value| {
            seen.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let id = v["id"].clone();
                match v["method"].as_str().unwrap_or("") {
                    "initialize" => initialized(&id, "inside", json!({"tools": {}}), "s-1"),
                    _ => rpc(&id, json!({"tools": []})),
                }
            })
        }),
        None,
    );
    let port = url.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    // A public address (TEST-NET ranges are refused as not public: this is a real one) first,
    // loopback next.
    let dns = Rebinder::start(Ipv4Addr::new(1, 1, 1, 1), Ipv4Addr::LOCALHOST);
    let s = Server::start_with_env(&[("DATANOTES_DNS", &dns.addr)]);
    let token = create_app(&s, json!({"name": "mover"}));

    // The app moves itself to a name: the check resolves it (a public address) and allows it.
    let moved = format!("http://inside.rebind.test:{port}/mcp");
    let (st, v) = s.call_as(
        Some(&token),
        "apps/update",
        &json!({"name": "mover", "mcp_url": moved}),
        &[],
    );
    assert_eq!(st, 200, "the check saw a public address: {v}");
    // The engine connects (its refresh after a new mcp_url, and a refresh asked now): the name
    // now resolves to 127.0.0.1, which the connection refuses.
    let (_, refreshed) = s.call_as(
        Some(&s.token),
        "apps/refresh",
        &json!({"name": "mover"}),
        &[],
    );
    let entry = s.ok_route("apps/get", json!({"name": "mover"}))["app"].clone();
    let answered = dns.answered.lock().unwrap().clone();
    assert!(
        answered.len() >= 2 && answered[0] == Ipv4Addr::new(1, 1, 1, 1),
        "the DNS server was asked at the check and again at the connection: {answered:?}"
    );
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "the app on loopback was reached through the rebound name"
    );
    assert_eq!(entry["reachable"], json!(false), "{entry}");
    let last = entry["lastError"].as_str().unwrap_or_default();
    assert!(
        last.contains("was not reached") && last.contains("not public"),
        "the app's error says its address was refused: {last}; refresh: {refreshed}"
    );
}

#[test]
fn a_client_metadata_document_whose_name_rebinds_to_loopback_is_not_fetched() {
    // Something listening on loopback where the rebound name would lead.
    let inside = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = inside.local_addr().unwrap().port();
    inside.set_nonblocking(true).unwrap();
    let dns = Rebinder::start(Ipv4Addr::new(1, 1, 1, 1), Ipv4Addr::LOCALHOST);
    let s = Server::start_with_env(&[("DATANOTES_DNS", &dns.addr)]);
    let (_, challenge) = oauth::pkce();
    let client = format!("https://meta.rebind.test:{port}/client.json");
    let (st, redirect, page) = oauth::open(&oauth::authorize_url(
        &s,
        &client,
        oauth::REDIRECT,
        &challenge,
        "m",
    ));
    let answered = dns.answered.lock().unwrap().clone();
    assert!(
        answered.len() >= 2 && answered[0] == Ipv4Addr::new(1, 1, 1, 1),
        "the DNS server was asked at the check and again at the fetch: {answered:?}"
    );
    assert_eq!((st, redirect), (400, None), "{page}");
    assert!(
        page.contains("127.0.0.1") && page.contains("does not connect to"),
        "the page says the address was refused at the connection: {page}"
    );
    assert!(
        inside.accept().is_err(),
        "the engine connected to loopback through the rebound name"
    );
}

/// An install from a registry (`mode`, given the port of a listener on loopback) through a
/// server whose DNS answers a public address, then loopback: refused, the DNS asked at the
/// check and again at the connection, the loopback listener never reached, nothing installed.
/// Answers the registry and the refusal (its message, and the whole answer).
fn refused_through_a_rebinding_name(
    mode: impl FnOnce(u16) -> crate::kit::hostile_registry::Mode,
) -> (crate::kit::hostile_registry::HostileRegistry, String, Value) {
    // Something listening on loopback where the rebound name would lead.
    let inside = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = inside.local_addr().unwrap().port();
    inside.set_nonblocking(true).unwrap();
    let dns = Rebinder::start(Ipv4Addr::new(1, 1, 1, 1), Ipv4Addr::LOCALHOST);
    let reg = crate::kit::hostile_registry::HostileRegistry::start(mode(port));
    let s = Server::start_with_env(&[("DATANOTES_DNS", &dns.addr)]);
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"source": reg.reference("apps/p:1"), "name": "p"}),
    );
    assert_eq!(st, 400, "{v}");
    assert_error_shape(&v["error"]);
    let msg = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let answered = dns.answered.lock().unwrap().clone();
    assert!(
        answered.len() >= 2 && answered[0] == Ipv4Addr::new(1, 1, 1, 1),
        "the DNS server was asked at the check and again at the connection: {answered:?} ({v})"
    );
    assert!(
        inside.accept().is_err(),
        "the engine connected to loopback through the rebound name: {v}"
    );
    let (_, apps) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(apps["apps"], json!([]), "nothing installed: {apps}");
    (reg, msg, v)
}

#[test]
fn a_registry_sign_in_whose_realm_rebinds_to_loopback_is_never_reached() {
    // A registry (the owner named it: on loopback, as allowed) whose challenge sends clients
    // to sign in at a name that is public when checked and loopback when connected to.
    let (reg, msg, v) = refused_through_a_rebinding_name(|port| {
        crate::kit::hostile_registry::Mode::SignInAt(format!(
            "https://realm.rebind.test:{port}/token"
        ))
    });
    assert!(
        msg.contains("sign in") && msg.contains("127.0.0.1"),
        "the error says the sign-in's address was refused at the connection: {v}"
    );
    assert!(
        reg.requests() >= 1,
        "the registry was asked for its challenge: {v}"
    );
}

#[test]
fn a_registry_blob_redirected_to_a_name_that_rebinds_to_loopback_is_never_fetched() {
    // The owner's registry serves the manifest and sends the component's blob to storage at a
    // name that is public when checked and loopback when connected to.
    let bytes = std::fs::read(crate::wasm::component("planning")).unwrap();
    let (reg, msg, v) = refused_through_a_rebinding_name(|port| {
        crate::kit::hostile_registry::Mode::RedirectBlob(
            bytes,
            format!("https://blob.rebind.test:{port}/blob"),
        )
    });
    assert!(
        msg.contains("blob.rebind.test") && msg.contains("127.0.0.1"),
        "the error names the redirect and the address refused at the connection: {v}"
    );
    assert!(
        reg.blob_gets() >= 1,
        "the registry's blob was asked for: {v}"
    );
}
