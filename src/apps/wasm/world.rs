//! The world check: a component's `tools` export against `wit/datanotes-app.wit`, so that a
//! component built for another world is refused with an error that names what differs.

use super::error::WasmError;
use wasmtime::component::Component;

/// The interface every app exports.
pub(super) const TOOLS_INTERFACE: &str = "datanotes:app/tools@0.1.0";
/// A function as the world declares it, written as WIT: name, parameters (name, type), result.
type FuncSig = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
);
/// The functions of [`TOOLS_INTERFACE`].
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
            (
                "ctx",
                "record { harness: option<string>, model: option<string>, session: option<string> }",
            ),
        ],
        "result<string, string>",
    ),
];

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

/// Checks a component's `tools` export against the world, so that a component built for another
/// world is refused with an error that names what differs (wasmtime's own error at
/// instantiation says only "type mismatch with parameters", not which function).
pub(super) fn check_world(engine: &wasmtime::Engine, c: &Component) -> Result<(), WasmError> {
    use wasmtime::component::types::ComponentItem;
    let ty = c.component_type();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    // Any 0.1.x release of the interface serves (wasmtime matches semver-compatible names).
    let prefix = TOOLS_INTERFACE.trim_end_matches('0');
    let Some(name) = exports
        .iter()
        .find(|n| *n == TOOLS_INTERFACE)
        .or_else(|| exports.iter().find(|n| n.starts_with(prefix)))
    else {
        return Err(WasmError::NoTools { exports });
    };
    let Some(ComponentItem::ComponentInstance(inst)) = ty.get_export(engine, name).map(|e| e.ty)
    else {
        return Err(WasmError::NotInterface { name: name.clone() });
    };
    let mut problems = vec![];
    for (func, want_params, want_result) in TOOLS_FUNCS {
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
    if problems.is_empty() {
        Ok(())
    } else {
        Err(WasmError::Mismatch {
            name: name.clone(),
            problems,
        })
    }
}

/// A component type written as WIT.
fn wit_type(t: &wasmtime::component::Type) -> String {
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
