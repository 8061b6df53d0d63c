//! The routes beside the operations: the apps registry (its lifecycle is `apps::install`'s),
//! webhooks, the metrics tokens, the change feed's long poll and tool-call records. [`ROUTES`]
//! is their table (path under `/datanotes/`, access class, handler); [`register`] puts each on the router, and [`run_route`] runs one: token, body,
//! `auth::authorize` (the one function), handler.

use super::{Authed, MAX_COMPONENT_BODY, json_body_max};
use crate::apps::{self, AppFields};
use crate::auth::{self, Access, Caller, Target};
use crate::error::{Error, parse};
use crate::feed::{self, Filter};
use crate::ops::Ctx;
use crate::server::{MAX_BODY, Shared};
use axum::Json;
use axum::extract::{Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

type Answer = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Error>> + Send>>;

/// A route beside the operations: its path under /datanotes/, its access class, its handler.
struct Route {
    path: &'static str,
    access: Access,
    run: fn(Shared, Ctx, Value) -> Answer,
}

/// An answer computed on the runtime (what awaits apps or sources).
fn answer(f: impl std::future::Future<Output = Result<Value, Error>> + Send + 'static) -> Answer {
    Box::pin(async move { Ok(Json(f.await?).into_response()) })
}

fn blocking(f: impl FnOnce() -> Result<Value, Error> + Send + 'static) -> Answer {
    Box::pin(async move {
        let v = tokio::task::spawn_blocking(f)
            .await
            .map_err(|_| Error::internal("the handler panicked"))??;
        Ok(Json(v).into_response())
    })
}

fn fields(v: Value) -> Result<AppFields, Error> {
    parse("this route", v)
}

fn name_of(v: &Value) -> Result<String, Error> {
    v.get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            Error::invalid("missing `name`")
                .column("name")
                .rule("required")
                .hint("add \"name\": \"<app name>\"")
        })
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CallArgs {
    tool: String,
    #[serde(default)]
    arguments: Value,
}

/// A metrics token's name (`metrics-tokens/create`, `metrics-tokens/revoke`).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NameArgs {
    name: String,
}

/// The routes beside the operations, each with its access class.
static ROUTES: &[Route] = &[
    Route {
        path: "apps/create",
        access: Access::Owner,
        run: |s, c, v| answer(async move { s.installer().create(c.actor, fields(v)?).await }),
    },
    Route {
        path: "apps",
        access: Access::Owner,
        run: |s, _, v| {
            blocking(move || {
                parse::<crate::engine::args::Empty>("apps", v)?;
                Ok(
                    json!({"apps": s.apps.list().iter().map(|a| s.agg.entry(a)).collect::<Vec<_>>()}),
                )
            })
        },
    },
    Route {
        path: "apps/get",
        access: Access::SelfService,
        run: |s, _, v| {
            blocking(move || {
                let name = name_of(&v)?;
                let rec = s.apps.get(&name).ok_or_else(|| apps::no_app(&name))?;
                Ok(json!({"app": s.agg.entry(&rec)}))
            })
        },
    },
    Route {
        path: "apps/update",
        access: Access::SelfService,
        run: |s, c, v| {
            answer(async move {
                let name = name_of(&v)?;
                let by_owner = matches!(c.caller, Caller::Owner);
                s.installer().update(&name, fields(v)?, by_owner).await
            })
        },
    },
    Route {
        path: "apps/upgrade",
        access: Access::Owner,
        run: |s, c, v| answer(async move { s.installer().upgrade(c.actor, v).await }),
    },
    Route {
        path: "apps/rollback",
        access: Access::Owner,
        run: |s, c, v| answer(async move { s.installer().rollback(c.actor, v).await }),
    },
    Route {
        path: "apps/refresh",
        access: Access::SelfService,
        run: |s, _, v| {
            Box::pin(async move {
                let name = name_of(&v)?;
                s.apps.get(&name).ok_or_else(|| apps::no_app(&name))?;
                s.agg.sync();
                let mut diff = s.agg.refresh(&name).await?;
                let rec = s.apps.get(&name).ok_or_else(|| apps::no_app(&name))?;
                diff["app"] = s.agg.entry(&rec);
                Ok(Json(diff).into_response())
            })
        },
    },
    Route {
        path: "apps/connect",
        access: Access::Owner,
        run: |s, _, v| Box::pin(super::app_connect::connect(s, v)),
    },
    Route {
        path: "apps/rotate-token",
        access: Access::Owner,
        run: |s, _, v| blocking(move || Ok(json!({"token": s.apps.rotate_token(&name_of(&v)?)?}))),
    },
    Route {
        path: "apps/delete",
        access: Access::Owner,
        run: |s, _, v| answer(async move { s.installer().delete(&name_of(&v)?) }),
    },
    Route {
        path: "apps/tools",
        access: Access::Read,
        run: |s, c, v| {
            blocking(move || {
                parse::<crate::engine::args::Empty>("apps/tools", v)?;
                Ok(s.agg.tools_json(&c.caller))
            })
        },
    },
    Route {
        path: "apps/call",
        access: Access::Read,
        run: |s, c, v| {
            Box::pin(async move {
                let a: CallArgs = parse("apps/call", v)?;
                let out = s.agg.call(&a.tool, a.arguments, c).await;
                Ok(Json(out.to_json()).into_response())
            })
        },
    },
    Route {
        path: "webhooks/create",
        access: Access::Owner,
        run: |s, _, v| blocking(move || s.webhooks.create(parse("webhooks/create", v)?)),
    },
    Route {
        path: "webhooks",
        access: Access::Read,
        run: |s, c, v| {
            blocking(move || {
                parse::<crate::engine::args::Empty>("webhooks", v)?;
                Ok(s.webhooks.list(&c.caller))
            })
        },
    },
    Route {
        path: "webhooks/delete",
        access: Access::Owner,
        run: |s, _, v| blocking(move || s.webhooks.delete(parse("webhooks/delete", v)?)),
    },
    Route {
        path: "metrics-tokens/create",
        access: Access::Owner,
        run: |s, _, v| {
            blocking(move || {
                let a: NameArgs = parse("metrics-tokens/create", v)?;
                s.metrics_tokens.create(&a.name)
            })
        },
    },
    Route {
        path: "metrics-tokens",
        access: Access::Owner,
        run: |s, _, v| {
            blocking(move || {
                parse::<crate::engine::args::Empty>("metrics-tokens", v)?;
                Ok(s.metrics_tokens.list())
            })
        },
    },
    Route {
        path: "metrics-tokens/revoke",
        access: Access::Owner,
        run: |s, _, v| {
            blocking(move || {
                let a: NameArgs = parse("metrics-tokens/revoke", v)?;
                s.metrics_tokens.revoke(&a.name)
            })
        },
    },
    Route {
        path: "tool-stats",
        access: Access::Metrics,
        run: |_, _, v| {
            blocking(move || {
                parse::<crate::engine::args::Empty>("tool-stats", v)?;
                Ok(crate::telemetry::recent::recent().snapshot())
            })
        },
    },
    Route {
        path: "changes",
        access: Access::Read,
        run: |s, c, v| {
            Box::pin(async move {
                let a: feed::ChangesArgs = parse("changes", v)?;
                let limit = a.limit.unwrap_or(100);
                if !(1..=feed::MAX_LIMIT).contains(&limit) {
                    return Err(Error::invalid(format!("limit {limit} is out of range"))
                        .column("limit")
                        .rule("max")
                        .hint(format!("use a limit from 1 to {}", feed::MAX_LIMIT)));
                }
                let filter = Filter::new(a.ops, a.tables)?;
                let wait =
                    feed::read_wait(s.engine.clone(), a.since, limit as usize, filter, a.wait_ms);
                // A server shutting down answers a waiting poll at once, with nothing yet.
                let mut closing = s.closing.subscribe();
                let page = tokio::select! {
                    page = wait => page?,
                    _ = closing.wait_for(|c| *c) => feed::Page { changes: vec![], next: a.since },
                };
                Ok((
                    [(header::CONTENT_TYPE, "application/json")],
                    page.to_json(&c.caller),
                )
                    .into_response())
            })
        },
    },
    Route {
        path: "tool-calls/record",
        access: Access::Read,
        run: |s, c, v| {
            blocking(move || {
                // Not waited for: committed with the writer's next batch, in order.
                feed::ToolCallRecord::parse(v)?.record(&s.engine, c.actor)?;
                Ok(json!({"queued": true}))
            })
        },
    },
];

/// Runs a route: body (the owner's component uploads may be larger), access check (the one
/// function), handler. The token was checked by [`Authed`].
async fn run_route(
    s: Shared,
    route: &'static Route,
    ctx: Ctx,
    req: Request,
) -> Result<Response, Error> {
    // Only the owner installs components: only the owner may send one in base64.
    let max = match (route.path, &ctx.caller) {
        ("apps/create" | "apps/update", Caller::Owner) => MAX_COMPONENT_BODY,
        _ => MAX_BODY,
    };
    // `apps/connect` registers the engine's own address as the browser reached it.
    let origin = (route.path == "apps/connect")
        .then(|| super::app_connect::origin(req.headers()))
        .flatten();
    let mut args = json_body_max(req, max).await?;
    if route.path == "apps/connect" {
        args["origin"] = json!(origin);
    }
    let target = match args.get("name").and_then(Value::as_str) {
        Some(n) if route.access == Access::SelfService => Target::App(n),
        _ => Target::None,
    };
    auth::authorize(&ctx.caller, route.access, target)?;
    (route.run)(s, ctx, args).await
}

/// Puts every route of [`ROUTES`] on the router: `POST /datanotes/<path>`, with and without a
/// trailing slash.
pub(super) fn register(mut r: super::Routes<Shared>) -> super::Routes<Shared> {
    for route in ROUTES {
        let handler = move |State(s): State<Shared>, Authed(ctx): Authed, req: Request| {
            run_route(s, route, ctx, req)
        };
        r = r
            .route(&format!("/datanotes/{}", route.path), post(handler))
            .route(&format!("/datanotes/{}/", route.path), post(handler));
    }
    r
}
