//! The world check: a component's `tools` export against `wit/datanotes-app.wit` (0.1) or
//! `wit/0.2/datanotes-app.wit` (0.2, whose `resources` and `prompts` exports are checked too
//! when the component has them), so that a component built for another world is refused with
//! an error that names what differs.
//!
//! [`TOOLS_FUNCS`], [`RESOURCES_FUNCS`] and [`PROMPTS_FUNCS`] write the exported functions'
//! types as WIT; tests parse the `.wit` files and fail when they disagree.

use super::error::WasmError;
use wasmtime::component::Component;

/// The interface every app exports.
pub(crate) const TOOLS_INTERFACE: &str = "datanotes:app/tools@0.1.0";
/// The same, in version 0.2 of the world (the same functions).
pub(crate) const TOOLS_INTERFACE_V2: &str = "datanotes:app/tools@0.2.0";
/// What a 0.2 app may export besides its tools.
pub(crate) const RESOURCES_INTERFACE: &str = "datanotes:app/resources@0.2.0";
pub(crate) const PROMPTS_INTERFACE: &str = "datanotes:app/prompts@0.2.0";

/// The version of the world a component of ours targets, and (0.2) what it exports besides
/// its tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2 { resources: bool, prompts: bool },
}

/// The context a call passes, as WIT.
const CALL_CONTEXT: &str =
    "record { harness: option<string>, model: option<string>, session: option<string> }";
/// A function as the world declares it, written as WIT: name, parameters (name, type), result.
type FuncSig = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
);
/// The functions of [`TOOLS_INTERFACE`] (checked against the `.wit` by a test).
const TOOLS_FUNCS: &[FuncSig] = &[
    (
        "list-tools",
        &[],
        "list<record { name: string, description: string, input-schema: string, tables: list<string> }>",
    ),
    ("instructions", &[], "string"),
    (
        "call-tool",
        &[
            ("name", "string"),
            ("arguments", "string"),
            ("ctx", CALL_CONTEXT),
        ],
        "result<string, string>",
    ),
];
/// The functions of [`RESOURCES_INTERFACE`] (checked against the `.wit` by a test).
const RESOURCES_FUNCS: &[FuncSig] = &[
    (
        "list-resources",
        &[],
        "list<record { uri: string, name: string, description: option<string>, mime-type: option<string> }>",
    ),
    (
        "list-resource-templates",
        &[],
        "list<record { uri-template: string, name: string, description: option<string>, mime-type: option<string> }>",
    ),
    (
        "read-resource",
        &[("uri", "string"), ("ctx", CALL_CONTEXT)],
        "result<string, string>",
    ),
];
/// The functions of [`PROMPTS_INTERFACE`] (checked against the `.wit` by a test).
const PROMPTS_FUNCS: &[FuncSig] = &[
    (
        "list-prompts",
        &[],
        "list<record { name: string, description: option<string>, arguments: list<record { name: string, description: option<string>, required: bool }> }>",
    ),
    (
        "get-prompt",
        &[
            ("name", "string"),
            ("arguments", "list<tuple<string, string>>"),
            ("ctx", CALL_CONTEXT),
        ],
        "result<string, string>",
    ),
];

/// The export of `c` that is `interface` (`ns:pkg/name@x.y.z`): that name, or any release of
/// the same minor version (wasmtime matches semver-compatible names).
fn find_export(exports: &[String], interface: &str) -> Option<String> {
    let prefix = interface.trim_end_matches('0');
    exports
        .iter()
        .find(|n| *n == interface)
        .or_else(|| exports.iter().find(|n| n.starts_with(prefix)))
        .cloned()
}

/// A function type written as WIT.
fn wit_func(params: &[(String, String)], results: &[String]) -> String {
    let p: Vec<String> = params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
    let r = match results {
        [] => String::new(),
        [one] => format!(" -> {one}"),
        many => format!(" -> ({})", many.join(", ")),
    };
    format!("func({}){r}", p.join(", "))
}

/// Checks a component's `tools` export against the world (0.1 or 0.2), and a 0.2 component's
/// `resources` and `prompts` exports if it has them, so that a component built for another world
/// is refused with an error that names what differs (wasmtime's own error at instantiation says
/// only "type mismatch with parameters", not which function). Answers the version it targets.
pub(super) fn check_world(engine: &wasmtime::Engine, c: &Component) -> Result<Version, WasmError> {
    let ty = c.component_type();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    let (name, mut version) = if let Some(n) = find_export(&exports, TOOLS_INTERFACE) {
        (n, Version::V1)
    } else if let Some(n) = find_export(&exports, TOOLS_INTERFACE_V2) {
        (
            n,
            Version::V2 {
                resources: false,
                prompts: false,
            },
        )
    } else if let Some(n) = exports
        .iter()
        .find(|n| n.starts_with("datanotes:app/tools@"))
    {
        return Err(WasmError::Mismatch {
            name: n.clone(),
            problems: vec!["this engine serves the versions 0.1 and 0.2 of the world".into()],
        });
    } else {
        return Err(WasmError::NoTools { exports });
    };
    let mut problems = vec![];
    check_funcs(engine, c, &name, TOOLS_FUNCS, &mut problems)?;
    if let Version::V2 { resources, prompts } = &mut version {
        for (iface, funcs, has) in [
            (RESOURCES_INTERFACE, RESOURCES_FUNCS, resources),
            (PROMPTS_INTERFACE, PROMPTS_FUNCS, prompts),
        ] {
            if let Some(n) = find_export(&exports, iface) {
                let before = problems.len();
                check_funcs(engine, c, &n, funcs, &mut problems)?;
                if problems.len() > before {
                    return Err(WasmError::Mismatch { name: n, problems });
                }
                *has = true;
            }
        }
    }
    if problems.is_empty() {
        Ok(version)
    } else {
        Err(WasmError::Mismatch { name, problems })
    }
}

/// Checks the functions of the exported interface `name` against `funcs`, one line per
/// difference in `problems`.
fn check_funcs(
    engine: &wasmtime::Engine,
    c: &Component,
    name: &str,
    funcs: &[FuncSig],
    problems: &mut Vec<String>,
) -> Result<(), WasmError> {
    use wasmtime::component::types::ComponentItem;
    let ty = c.component_type();
    let Some(ComponentItem::ComponentInstance(inst)) = ty.get_export(engine, name).map(|e| e.ty)
    else {
        return Err(WasmError::NotInterface {
            name: name.to_string(),
        });
    };
    for (func, want_params, want_result) in funcs {
        let want_params: Vec<(String, String)> = want_params
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        let want_results = vec![want_result.to_string()];
        let want = wit_func(&want_params, &want_results);
        match inst.get_export(engine, func).map(|e| e.ty) {
            None => problems.push(format!("it has no function {func}: {want}")),
            Some(ComponentItem::ComponentFunc(f)) => {
                let params: Vec<(String, String)> = f
                    .params()
                    .map(|(n, t)| (n.to_string(), wit_type(&t)))
                    .collect();
                let results: Vec<String> = f.results().map(|t| wit_type(&t)).collect();
                // Parameter names do not matter to callers; types do.
                let types =
                    |p: &[(String, String)]| p.iter().map(|x| x.1.clone()).collect::<Vec<_>>();
                if types(&params) != types(&want_params) || results != want_results {
                    problems.push(format!(
                        "{func} is {}, the world wants {want}",
                        wit_func(&params, &results)
                    ));
                }
            }
            Some(_) => problems.push(format!("its export {func} is not a function")),
        }
    }
    Ok(())
}

/// Whether `c` imports `datanotes:app/engine.cancelled` (0.2): a call it serves is then given a
/// short grace to return once cancelled, before it is interrupted.
pub(super) fn imports_cancelled(engine: &wasmtime::Engine, c: &Component) -> bool {
    use wasmtime::component::types::ComponentItem;
    c.component_type().imports(engine).any(|(n, item)| {
        n.starts_with("datanotes:app/engine@0.2.")
            && matches!(item.ty, ComponentItem::ComponentInstance(i)
                if i.get_export(engine, "cancelled").is_some())
    })
}

/// A component type written as WIT.
pub(super) fn wit_type(t: &wasmtime::component::Type) -> String {
    use wasmtime::component::Type as T;
    let opt = |t: Option<T>| t.map(|t| wit_type(&t)).unwrap_or_else(|| "_".into());
    match t {
        T::Bool => "bool".into(),
        T::S8 => "s8".into(),
        T::U8 => "u8".into(),
        T::S16 => "s16".into(),
        T::U16 => "u16".into(),
        T::S32 => "s32".into(),
        T::U32 => "u32".into(),
        T::S64 => "s64".into(),
        T::U64 => "u64".into(),
        T::Float32 => "f32".into(),
        T::Float64 => "f64".into(),
        T::Char => "char".into(),
        T::String => "string".into(),
        T::List(l) => format!("list<{}>", wit_type(&l.ty())),
        T::FixedLengthList(l) => format!("list<{}, {}>", wit_type(&l.ty()), l.len()),
        T::Map(m) => format!("map<{}, {}>", wit_type(&m.key()), wit_type(&m.value())),
        T::Record(r) => format!(
            "record {{ {} }}",
            r.fields()
                .map(|f| format!("{}: {}", f.name, wit_type(&f.ty)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        T::Tuple(t) => format!(
            "tuple<{}>",
            t.types()
                .map(|t| wit_type(&t))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        T::Variant(v) => format!(
            "variant {{ {} }}",
            v.cases()
                .map(|c| match c.ty {
                    Some(t) => format!("{}({})", c.name, wit_type(&t)),
                    None => c.name.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        T::Enum(e) => format!("enum {{ {} }}", e.names().collect::<Vec<_>>().join(", ")),
        T::Flags(f) => format!("flags {{ {} }}", f.names().collect::<Vec<_>>().join(", ")),
        T::Option(o) => format!("option<{}>", wit_type(&o.ty())),
        T::Result(r) => match (r.ok(), r.err()) {
            (None, None) => "result".into(),
            (ok, err) => format!("result<{}, {}>", opt(ok), opt(err)),
        },
        T::Own(_) => "own<resource>".into(),
        T::Borrow(_) => "borrow<resource>".into(),
        T::Future(f) => format!("future<{}>", opt(f.ty())),
        T::Stream(s) => format!("stream<{}>", opt(s.ty())),
        T::ErrorContext => "error-context".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::wasm::WORLD;
    use std::collections::HashMap;
    use wit_parser::{Resolve, Type, TypeDefKind, WorldItem};

    /// A type of the parsed `.wit`, written as [`wit_type`] writes a component's.
    fn parsed(r: &Resolve, t: &Type) -> String {
        let opt = |t: &Option<Type>| t.as_ref().map(|t| parsed(r, t)).unwrap_or("_".into());
        let id = match t {
            Type::Bool => return "bool".into(),
            Type::U8 => return "u8".into(),
            Type::U16 => return "u16".into(),
            Type::U32 => return "u32".into(),
            Type::U64 => return "u64".into(),
            Type::S8 => return "s8".into(),
            Type::S16 => return "s16".into(),
            Type::S32 => return "s32".into(),
            Type::S64 => return "s64".into(),
            Type::F32 => return "f32".into(),
            Type::F64 => return "f64".into(),
            Type::Char => return "char".into(),
            Type::String => return "string".into(),
            Type::ErrorContext => return "error-context".into(),
            Type::Id(id) => *id,
        };
        let join = |v: Vec<String>| v.join(", ");
        match &r.types[id].kind {
            TypeDefKind::Type(t) => parsed(r, t),
            TypeDefKind::Record(rec) => format!(
                "record {{ {} }}",
                join(
                    rec.fields
                        .iter()
                        .map(|f| format!("{}: {}", f.name, parsed(r, &f.ty)))
                        .collect()
                )
            ),
            TypeDefKind::List(t) => format!("list<{}>", parsed(r, t)),
            TypeDefKind::FixedLengthList(t, n) => format!("list<{}, {n}>", parsed(r, t)),
            TypeDefKind::Map(k, v) => format!("map<{}, {}>", parsed(r, k), parsed(r, v)),
            TypeDefKind::Tuple(t) => format!(
                "tuple<{}>",
                join(t.types.iter().map(|t| parsed(r, t)).collect())
            ),
            TypeDefKind::Variant(v) => format!(
                "variant {{ {} }}",
                join(
                    v.cases
                        .iter()
                        .map(|c| match &c.ty {
                            Some(t) => format!("{}({})", c.name, parsed(r, t)),
                            None => c.name.clone(),
                        })
                        .collect()
                )
            ),
            TypeDefKind::Enum(e) => format!(
                "enum {{ {} }}",
                join(e.cases.iter().map(|c| c.name.clone()).collect())
            ),
            TypeDefKind::Flags(f) => format!(
                "flags {{ {} }}",
                join(f.flags.iter().map(|c| c.name.clone()).collect())
            ),
            TypeDefKind::Option(t) => format!("option<{}>", parsed(r, t)),
            TypeDefKind::Result(res) => match (&res.ok, &res.err) {
                (None, None) => "result".into(),
                (ok, err) => format!("result<{}, {}>", opt(ok), opt(err)),
            },
            TypeDefKind::Future(t) => format!("future<{}>", opt(t)),
            TypeDefKind::Stream(t) => format!("stream<{}>", opt(t)),
            TypeDefKind::Handle(wit_parser::Handle::Own(_)) => "own<resource>".into(),
            TypeDefKind::Handle(wit_parser::Handle::Borrow(_)) => "borrow<resource>".into(),
            other => panic!("no WIT text for a {}", other.as_str()),
        }
    }

    /// The hand-written [`TOOLS_INTERFACE`], [`TOOLS_FUNCS`] and [`WORLD`] say what
    /// `wit/datanotes-app.wit` says: a change to the `.wit` fails here until they follow.
    #[test]
    fn tools_funcs_are_the_wit() {
        let mut r = Resolve::default();
        let wit = concat!(env!("CARGO_MANIFEST_DIR"), "/wit");
        let (pkg, _) = r.push_dir(wit).expect("wit/ parses");
        let world = r.select_world(&[pkg], Some("app")).expect("the world app");
        let p = &r.packages[pkg].name;
        let version = p
            .version
            .as_ref()
            .map(|v| format!("@{v}"))
            .unwrap_or_default();
        assert_eq!(
            WORLD,
            format!(
                "{}:{}/{}{version}",
                p.namespace, p.name, r.worlds[world].name
            )
        );
        let exports: Vec<_> = r.worlds[world].exports.values().collect();
        let [WorldItem::Interface { id, .. }] = exports[..] else {
            panic!("the world exports one interface");
        };
        assert_eq!(r.id_of(*id).as_deref(), Some(TOOLS_INTERFACE));
        // Each function as WIT text, as the world check's messages write it.
        assert_eq!(
            by_hand(TOOLS_FUNCS),
            funcs_of(&r, *id),
            "TOOLS_FUNCS differs from wit/"
        );
    }

    /// The functions of `iface` in `r`, as WIT text.
    fn funcs_of(r: &Resolve, iface: wit_parser::InterfaceId) -> Vec<String> {
        r.interfaces[iface]
            .functions
            .values()
            .map(|f| {
                let params: Vec<(String, String)> = f
                    .params
                    .iter()
                    .map(|p| (p.name.clone(), parsed(r, &p.ty)))
                    .collect();
                let results: Vec<String> = f.result.iter().map(|t| parsed(r, t)).collect();
                format!("{}: {}", f.name, wit_func(&params, &results))
            })
            .collect()
    }

    fn by_hand(funcs: &[FuncSig]) -> Vec<String> {
        funcs
            .iter()
            .map(|(name, params, result)| {
                let params: Vec<(String, String)> = params
                    .iter()
                    .map(|(n, t)| (n.to_string(), t.to_string()))
                    .collect();
                format!("{name}: {}", wit_func(&params, &[result.to_string()]))
            })
            .collect()
    }

    /// The same for version 0.2 (`wit/0.2/`): its worlds `app` and `app-with-content`, the
    /// functions of `tools`, `resources` and `prompts`, and the world's new imports.
    #[test]
    fn the_0_2_funcs_are_the_wit() {
        let mut r = Resolve::default();
        let wit = concat!(env!("CARGO_MANIFEST_DIR"), "/wit/0.2");
        let (pkg, _) = r.push_dir(wit).expect("wit/0.2 parses");
        assert_eq!(
            r.packages[pkg].name.to_string(),
            "datanotes:app@0.2.0",
            "the package's version"
        );
        let world = r
            .select_world(&[pkg], Some("app-with-content"))
            .expect("the world app-with-content");
        let mut ifaces = HashMap::new();
        for item in r.worlds[world].exports.values() {
            let WorldItem::Interface { id, .. } = item else {
                panic!("the world exports interfaces");
            };
            ifaces.insert(r.id_of(*id).unwrap(), *id);
        }
        for (name, funcs) in [
            (TOOLS_INTERFACE_V2, TOOLS_FUNCS),
            (RESOURCES_INTERFACE, RESOURCES_FUNCS),
            (PROMPTS_INTERFACE, PROMPTS_FUNCS),
        ] {
            let id = ifaces
                .get(name)
                .unwrap_or_else(|| panic!("{name} is exported"));
            assert_eq!(
                by_hand(funcs),
                funcs_of(&r, *id),
                "{name} differs from wit/0.2"
            );
        }
        let engine = r.worlds[world]
            .imports
            .values()
            .find_map(|i| match i {
                WorldItem::Interface { id, .. }
                    if r.id_of(*id).as_deref() == Some("datanotes:app/engine@0.2.0") =>
                {
                    Some(*id)
                }
                _ => None,
            })
            .expect("the world imports the engine");
        assert_eq!(
            funcs_of(&r, engine),
            [
                "call: func(op: string, args: string) -> result<string, record { status: u16, code: string, message: string, json: string }>",
                "progress: func(done: f64, total: option<f64>, message: option<string>)",
                "cancelled: func() -> bool",
            ]
        );
    }
}
