//! Typed components: any component that does not export `datanotes:app/tools`. Every exported
//! function (of the world, or of an exported interface) is a tool, its JSON Schemas derived from
//! its WIT types (`schema.rs`), its arguments checked and converted before the guest runs and
//! its result converted back (`convert.rs`, `call.rs`). A typed component is compiled and shared
//! by the runtime (`runtime/` holds the [`Shared`] ones; this module compiles with its engine):
//! the two know each other by design.
//!
//! Names: `<app>_<function>`, the function's kebab-case name with `-` as `_` (`get-point` in app
//! `geo` is `geo_get_point`); when two exported interfaces have a function of the same name,
//! theirs are `<app>_<interface>_<function>` (the interface's own name, without package or
//! version). Descriptions: the function's WIT doc comment when the component carries a
//! `package-docs` custom section, else its signature. A function whose signature has a
//! resource, a future or a stream is skipped with the reason on the app's entry.
//!
//! Imports: `datanotes:app/engine` and `log` (with the app's own scope, as for our world) and
//! WASI; any other import is refused at install, named.
//!
//! Both kinds of component share the pool, the limits, the scopes and `AppBackend`.

mod call;
mod convert;
mod schema;

use super::bindings;
use super::error::WasmError;
use super::host::Host;
use super::runtime::WasmRuntime;
use super::world::{TOOLS_INTERFACE, Version, check_world, imports_cancelled, wit_type};
use crate::apps::backend::Listing;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use wasmtime::Store;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Type};

/// A component ready to instantiate, for one app: its loaded and linked code (shared by every
/// app installed from the same file), and for a typed component the app's own tools (their
/// names carry the app's name).
#[derive(Clone)]
pub(in crate::apps::wasm) enum Pre {
    /// Exports `datanotes:app/tools`.
    World(Arc<Shared>),
    /// Any other component: its functions are the tools.
    Typed(Arc<Shared>, Arc<Typed>),
}

/// A component loaded once (mapped from the compile cache) and linked against the host, for
/// every app installed from it: the runtime keeps it by SHA-256 while an app holds it
/// ([`WasmRuntime::shared`]), so five apps of one Python component hold its code and
/// metadata once.
pub(in crate::apps::wasm) struct Shared {
    linked: Linked,
    /// Whether its code is mapped from the compile cache file (its pages can be released).
    pub(in crate::apps::wasm) mapped: bool,
    /// The live instances of it, of every app installed from it.
    pub(in crate::apps::wasm) meter: Arc<super::limits::Meter>,
    /// Whether it imports `engine.cancelled` (0.2): a cancelled call of it is given a short
    /// grace to return before it is interrupted.
    pub(in crate::apps::wasm) grace: bool,
}

/// A component linked against the host, of either kind.
enum Linked {
    World(bindings::AppPre<Host>),
    /// Of the world 0.2: its tools, and its resources and prompts if it exports them.
    World2(InstancePre<Host>, Box<V2Indices>),
    Typed(InstancePre<Host>),
}

/// Where a 0.2 component's exports are.
struct V2Indices {
    tools: v2::tools::GuestIndices,
    resources: Option<v2::resources::GuestIndices>,
    prompts: Option<v2::prompts::GuestIndices>,
}

use super::bindings_v2::exports::datanotes::app as v2;

/// An instance of a 0.2 component: its exports.
pub(in crate::apps::wasm) struct V2 {
    pub(in crate::apps::wasm) tools: v2::tools::Guest,
    pub(in crate::apps::wasm) resources: Option<v2::resources::Guest>,
    pub(in crate::apps::wasm) prompts: Option<v2::prompts::Guest>,
}

impl Shared {
    /// `c` checked (of our world, or typed with only imports we link) and linked.
    pub(in crate::apps::wasm) fn new(
        rt: &WasmRuntime,
        c: &Component,
        mapped: bool,
    ) -> Result<Shared, WasmError> {
        let link = |e: wasmtime::Error| WasmError::Link(format!("{e:#}"));
        let ty = c.component_type();
        // Any version of our tools interface: of our world (a wrong version is refused there,
        // named, rather than its functions offered as typed tools).
        let ours = TOOLS_INTERFACE.split('@').next().unwrap_or(TOOLS_INTERFACE);
        let linked = if ty
            .exports(&rt.engine)
            .any(|(n, _)| n.split('@').next() == Some(ours))
        {
            let version = check_world(&rt.engine, c)?;
            let ipre = rt.linker.instantiate_pre(c).map_err(link)?;
            match version {
                Version::V1 => Linked::World(bindings::AppPre::new(ipre).map_err(link)?),
                Version::V2 { resources, prompts } => {
                    let indices = V2Indices {
                        tools: v2::tools::GuestIndices::new(&ipre).map_err(link)?,
                        resources: resources
                            .then(|| v2::resources::GuestIndices::new(&ipre))
                            .transpose()
                            .map_err(link)?,
                        prompts: prompts
                            .then(|| v2::prompts::GuestIndices::new(&ipre))
                            .transpose()
                            .map_err(link)?,
                    };
                    Linked::World2(ipre, Box::new(indices))
                }
            }
        } else {
            check_imports(rt, c)?;
            Linked::Typed(rt.linker.instantiate_pre(c).map_err(link)?)
        };
        Ok(Shared {
            linked,
            mapped,
            meter: Arc::default(),
            grace: imports_cancelled(&rt.engine, c),
        })
    }

    /// The component it instantiates.
    pub(in crate::apps::wasm) fn component(&self) -> &Component {
        match &self.linked {
            Linked::World(p) => p.instance_pre().component(),
            Linked::World2(p, _) | Linked::Typed(p) => p.component(),
        }
    }
}

impl Pre {
    /// The loaded code it instantiates.
    pub(in crate::apps::wasm) fn shared(&self) -> &Arc<Shared> {
        match self {
            Pre::World(s) | Pre::Typed(s, _) => s,
        }
    }

    /// The component of app `app` (installed as `sha`), loaded and linked as `shared`, ready
    /// to instantiate: a typed component's tools are found (and named for the app) here.
    pub(in crate::apps::wasm) fn new(
        rt: &WasmRuntime,
        shared: Arc<Shared>,
        sha: &str,
        app: &str,
    ) -> Result<Pre, WasmError> {
        if let Linked::World(_) | Linked::World2(..) = shared.linked {
            return Ok(Pre::World(shared));
        }
        // What listing a typed component costs: its docs read, its tools derived.
        let t0 = std::time::Instant::now();
        // The WIT docs, if the component carries them (read from its installed file).
        let docs = std::fs::File::open(rt.apps_dir.join(format!("{sha}.wasm")))
            .ok()
            .and_then(|f| package_docs(std::io::BufReader::new(f)));
        let typed = discover(&rt.engine, shared.component(), app, docs.as_ref())?;
        rt.note_listing(sha, true, t0.elapsed());
        Ok(Pre::Typed(shared, Arc::new(typed)))
    }

    /// A new instance in `store`.
    pub(in crate::apps::wasm) async fn instantiate_async(
        &self,
        store: &mut Store<Host>,
    ) -> wasmtime::Result<Guest> {
        Ok(match &self.shared().linked {
            Linked::World(p) => Guest::World(p.instantiate_async(store).await?),
            Linked::World2(p, ix) => {
                let i = p.instantiate_async(&mut *store).await?;
                Guest::World2(Box::new(V2 {
                    tools: ix.tools.load(&mut *store, &i)?,
                    resources: ix
                        .resources
                        .as_ref()
                        .map(|r| r.load(&mut *store, &i))
                        .transpose()?,
                    prompts: ix
                        .prompts
                        .as_ref()
                        .map(|r| r.load(&mut *store, &i))
                        .transpose()?,
                }))
            }
            Linked::Typed(p) => Guest::Typed(p.instantiate_async(store).await?),
        })
    }
}

/// An instance of either kind.
pub(in crate::apps::wasm) enum Guest {
    /// Of our world.
    World(bindings::App),
    /// Of our world, version 0.2.
    World2(Box<V2>),
    /// Typed: its functions are looked up by export index.
    Typed(wasmtime::component::Instance),
}

/// A typed component's tools.
pub(in crate::apps::wasm) struct Typed {
    /// By tool name.
    funcs: HashMap<String, Func>,
    /// The tools, the functions skipped and why, the instructions (the world's docs).
    pub(in crate::apps::wasm) listing: Listing,
}

/// One exported function, as a tool.
struct Func {
    index: ComponentExportIndex,
    params: Vec<(String, Type)>,
    result: Option<Type>,
}

/// The imports a typed component may have: the engine, the log and their types, and WASI.
fn check_imports(rt: &WasmRuntime, c: &Component) -> Result<(), WasmError> {
    const OURS: &[&str] = &[
        "datanotes:app/engine@0.1.",
        "datanotes:app/log@0.1.",
        "datanotes:app/types@0.1.",
        "datanotes:app/engine@0.2.",
        "datanotes:app/log@0.2.",
        "datanotes:app/types@0.2.",
    ];
    for (name, _) in c.component_type().imports(&rt.engine) {
        if !name.starts_with("wasi:") && !OURS.iter().any(|p| name.starts_with(p)) {
            return Err(WasmError::Import {
                name: name.to_string(),
            });
        }
    }
    Ok(())
}

/// The `package-docs` custom section of a component (wit-component's JSON of the WIT package's
/// doc comments), if it has one at its top level. Reads the section headers and skips over the
/// rest: a Python component's 18 MB are not read for it.
fn package_docs(mut r: impl Read + Seek) -> Option<Value> {
    fn byte(r: &mut impl Read) -> Option<u8> {
        let mut b = [0u8];
        r.read_exact(&mut b).ok()?;
        Some(b[0])
    }
    fn leb(r: &mut impl Read) -> Option<u64> {
        let mut n = 0u64;
        for i in 0..10 {
            let b = byte(r)?;
            n |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }
    const NAME: &[u8] = b"package-docs";
    let mut head = [0u8; 8];
    r.read_exact(&mut head).ok()?;
    if &head[..4] != b"\0asm" {
        return None;
    }
    loop {
        // The end of the file ends the loop.
        let id = byte(&mut r)?;
        let size = leb(&mut r)?;
        let start = r.stream_position().ok()?;
        if id == 0 && leb(&mut r)? == NAME.len() as u64 {
            let mut name = [0u8; NAME.len()];
            r.read_exact(&mut name).ok()?;
            if name == NAME {
                let rest = (start + size).checked_sub(r.stream_position().ok()?)?;
                let mut data = vec![];
                r.take(rest.min(16 << 20)).read_to_end(&mut data).ok()?;
                // A version byte (0 or 1), then JSON.
                return match data.split_first() {
                    Some((0 | 1, json)) => serde_json::from_slice(json).ok(),
                    _ => None,
                };
            }
        }
        r.seek(SeekFrom::Start(start + size)).ok()?;
    }
}

/// A doc comment in package-docs: a string, or `{"docs": …}`.
fn doc_of(v: Option<&Value>) -> Option<String> {
    let v = v?;
    let s = v
        .as_str()
        .or_else(|| v.get("docs").and_then(Value::as_str))?;
    Some(s.trim().to_string()).filter(|s| !s.is_empty())
}

/// The doc comment of function `func` of `iface` (an interface's export name) or of the world.
fn func_docs(docs: Option<&Value>, iface: Option<&str>, func: &str) -> Option<String> {
    let docs = docs?;
    let worlds = docs.get("worlds").and_then(Value::as_object);
    match iface {
        None => worlds?
            .values()
            .find_map(|w| doc_of(w.get("func_exports").and_then(|f| f.get(func)))),
        Some(i) => {
            let short = short_name(i);
            let in_pkg = docs
                .get("interfaces")
                .and_then(|x| x.get(short))
                .and_then(|x| x.get("funcs"))
                .and_then(|f| doc_of(f.get(func)));
            in_pkg.or_else(|| {
                worlds?.values().find_map(|w| {
                    let x = w.get("interface_exports").and_then(|x| x.get(i))?;
                    doc_of(x.get("funcs").and_then(|f| f.get(func)))
                })
            })
        }
    }
}

/// An interface's own name: `wasi:cli/run@0.2.0` → `run`.
fn short_name(export: &str) -> &str {
    let s = export.rsplit_once('/').map_or(export, |(_, s)| s);
    s.split_once('@').map_or(s, |(s, _)| s)
}

/// A WIT name as part of a tool name: `-` becomes `_`.
fn snake(s: &str) -> String {
    s.replace('-', "_")
}

/// A found function: its interface (export name) if any, its name, its type, its export index.
struct Found {
    iface: Option<String>,
    name: String,
    params: Vec<(String, Type)>,
    results: Vec<Type>,
    index: ComponentExportIndex,
}

/// Why a resource, a future or a stream is no tool's parameter or result.
const NO_JSON: &str = ": resources, futures and streams cannot be passed as JSON";

/// The tools of a typed component of app `app`.
fn discover(
    engine: &wasmtime::Engine,
    c: &Component,
    app: &str,
    docs: Option<&Value>,
) -> Result<Typed, WasmError> {
    let ty = c.component_type();
    let mut found = vec![];
    let mut exports = vec![];
    let func = |iface: Option<&str>, name: &str, f: &wasmtime::component::types::ComponentFunc| {
        let outer = iface.and_then(|i| c.get_export_index(None, i));
        let index = c.get_export_index(outer.as_ref(), name)?;
        Some(Found {
            iface: iface.map(str::to_string),
            name: name.to_string(),
            params: f.params().map(|(n, t)| (n.to_string(), t)).collect(),
            results: f.results().collect(),
            index,
        })
    };
    for (name, item) in ty.exports(engine) {
        exports.push(name.to_string());
        match item.ty {
            ComponentItem::ComponentFunc(f) => found.extend(func(None, name, &f)),
            ComponentItem::ComponentInstance(inst) => {
                for (fname, fitem) in inst.exports(engine) {
                    if let ComponentItem::ComponentFunc(f) = fitem.ty {
                        found.extend(func(Some(name), fname, &f));
                    }
                }
            }
            _ => {}
        }
    }
    if found.is_empty() {
        return Err(WasmError::NoTools { exports });
    }
    // A name two interfaces' functions would share: theirs get the interface's name.
    let mut count: HashMap<String, usize> = HashMap::new();
    for f in &found {
        *count.entry(snake(&f.name)).or_default() += 1;
    }
    let mut funcs = HashMap::new();
    let (mut tools, mut skipped) = (vec![], vec![]);
    for f in found {
        // `[method]counter.get` (a resource's): `counter_get`.
        let bare = f.name.rsplit_once(']').map_or(f.name.as_str(), |(_, n)| n);
        let fname = snake(bare).replace('.', "_");
        let name = match &f.iface {
            Some(i) if count[&snake(&f.name)] > 1 => {
                format!("{app}_{}_{fname}", snake(short_name(i)))
            }
            _ => format!("{app}_{fname}"),
        };
        let wit_name = match &f.iface {
            Some(i) => format!("{i}#{}", f.name),
            None => f.name.clone(),
        };
        let sig = signature(&f.name, &f.params, &f.results);
        // A resource's constructor or method, or a resource, future or stream in the signature.
        let why = if f.name.starts_with('[') {
            Some("it belongs to a resource".to_string())
        } else if f.iface.as_deref() == Some("exports")
            && f.name == "init"
            && f.params.first().is_some_and(|p| p.0 == "app-name")
        {
            // componentize-py's pre-initialisation hook: not for agents.
            Some("it is componentize-py's initialisation hook".into())
        } else {
            f.params
                .iter()
                .find_map(|(p, t)| {
                    schema::unsupported(t).map(|w| format!("its parameter {p} is {w}{NO_JSON}"))
                })
                .or_else(|| {
                    f.results.iter().find_map(|t| {
                        schema::unsupported(t).map(|w| format!("its result is {w}{NO_JSON}"))
                    })
                })
                .or_else(|| (f.results.len() > 1).then(|| "it has several results".into()))
        };
        if let Some(why) = why {
            skipped.push(json!({"name": name, "takenBy": null, "function": wit_name,
                "reason": format!("{why} ({sig})")}));
            continue;
        }
        let result = f.results.into_iter().next();
        let description = func_docs(docs, f.iface.as_deref(), &f.name).unwrap_or(sig);
        let tool = json!({
            "name": name,
            "description": description,
            "inputSchema": schema::input_schema(&f.params),
            "outputSchema": schema::output_schema(result.as_ref()),
            "_meta": {WIT_META: wit_name},
        });
        match serde_json::from_value(tool) {
            Ok(t) => tools.push(t),
            Err(e) => {
                skipped.push(json!({"name": name, "takenBy": null, "reason": e.to_string()}));
                continue;
            }
        }
        funcs.insert(
            name,
            Func {
                index: f.index,
                params: f.params,
                result,
            },
        );
    }
    let instructions = docs.and_then(|d| {
        let world = d
            .get("worlds")
            .and_then(Value::as_object)
            .and_then(|w| w.values().find_map(|w| doc_of(Some(w))));
        world.or_else(|| doc_of(Some(d)))
    });
    Ok(Typed {
        funcs,
        listing: Listing {
            tools,
            instructions,
            skipped,
            ..Default::default()
        },
    })
}

/// Whether a listing is a typed component's, whose tools (and skipped functions) are named for
/// the app: its tools carry `_meta["datanotes/wit"]`, its skipped functions their `function`.
pub(in crate::apps::wasm) fn names_the_app(l: &Listing) -> bool {
    l.tools
        .iter()
        .any(|t| t.meta.as_ref().is_some_and(|m| m.0.contains_key(WIT_META)))
        || l.skipped.iter().any(|s| s.get("function").is_some())
}

/// The key of a typed tool's `_meta` that names its WIT function.
const WIT_META: &str = "datanotes/wit";

/// A function's signature as WIT, e.g. `norm2(p: record { x: s32, y: s32 }) -> u64`.
fn signature(name: &str, params: &[(String, Type)], results: &[Type]) -> String {
    let p: Vec<String> = params
        .iter()
        .map(|(n, t)| format!("{n}: {}", wit_type(t)))
        .collect();
    let r: Vec<String> = results.iter().map(wit_type).collect();
    let r = match &r[..] {
        [] => String::new(),
        [one] => format!(" -> {one}"),
        many => format!(" -> ({})", many.join(", ")),
    };
    format!("{name}({}){r}", p.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(short_name("wasi:cli/run@0.2.0"), "run");
        assert_eq!(short_name("local:demo/shapes"), "shapes");
        assert_eq!(short_name("shapes"), "shapes");
        assert_eq!(snake("get-point"), "get_point");
    }

    #[test]
    fn docs_are_found() {
        let d = json!({"worlds": {"w": {"docs": "A world.", "func_exports": {"hello": "Says hi."},
            "interface_exports": {"local": {"funcs": {"f": {"docs": "Local f."}}}}}},
            "interfaces": {"shapes": {"funcs": {"area": "The area."}}}});
        assert_eq!(
            func_docs(Some(&d), None, "hello").as_deref(),
            Some("Says hi.")
        );
        assert_eq!(
            func_docs(Some(&d), Some("x:y/shapes@1.0.0"), "area").as_deref(),
            Some("The area.")
        );
        assert_eq!(
            func_docs(Some(&d), Some("local"), "f").as_deref(),
            Some("Local f.")
        );
        assert_eq!(func_docs(Some(&d), None, "nope"), None);
        let mut section = b"\0asm\x0d\x00\x01\x00".to_vec();
        let body = [&[12u8][..], b"package-docs", &[1], d.to_string().as_bytes()].concat();
        section.push(0);
        let mut n = body.len();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                section.push(b);
                break;
            }
            section.push(b | 0x80);
        }
        section.extend(body);
        section.extend(b"\x01\x02\x00\x00"); // a section after it
        assert_eq!(package_docs(std::io::Cursor::new(&section)), Some(d));
        assert_eq!(package_docs(std::io::Cursor::new(&section[..20])), None);
        assert_eq!(
            package_docs(std::io::Cursor::new(b"\0asm\x0d\x00\x01\x00")),
            None
        );
    }
}
