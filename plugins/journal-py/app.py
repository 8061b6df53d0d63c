"""journal: a datanotes WASM app in Python (componentize-py).

A daily journal in the table `personal.notes.daily`: one row a day (its id is the date), each
entry a timestamped line of the row's Markdown body. Everything goes through the engine import,
with the app's own rights (install it with write ["personal.notes.daily"] and ddl true, so it can
create its table on first use).
"""

import json
from datetime import date as Date, datetime, timezone

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import engine, log
from wit_world.imports.types import CallContext, EngineError, Level, Tool

TABLE = "personal.notes.daily"


class EngineRefused(Exception):
    def __init__(self, e: EngineError):
        super().__init__(e.message)
        self.error = e


def call(op: str, args: dict) -> dict:
    """Runs an engine operation; a refusal raises EngineRefused with the engine's error."""
    try:
        return json.loads(engine.call(op, json.dumps(args)))
    except Err as e:
        raise EngineRefused(e.value)


def ensure_table() -> None:
    try:
        call("describe_table", {"table": TABLE})
    except EngineRefused as e:
        if e.error.code != "not_found":
            raise
        call("create_table", {
            "table": TABLE,
            "description": "A daily journal: one row a day, one line per entry",
            "columns": {
                "date": {"type": "date", "required": True, "unique": True},
                "tags": {"type": "list"},
            },
        })
        log.log(Level.INFO, f"created {TABLE}")


def today() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d")


def check_date(d: str) -> str:
    # Not datetime.strptime: it imports _strptime lazily, and a componentized app has no
    # modules beyond those its code imported when it was built.
    try:
        Date.fromisoformat(d)
    except (TypeError, ValueError):
        raise ValueError(f"date {d!r} is not a YYYY-MM-DD date")
    return d


def append(args: dict) -> dict:
    text = str(args.get("text") or "").strip()
    if not text:
        raise ValueError("give the entry's text")
    date = check_date(args.get("date") or today())
    tags = [str(t) for t in args.get("tags") or []]
    line = f"- {datetime.now(timezone.utc).strftime('%H:%M')} {text}"
    ensure_table()
    # Optimistic: read, append, write with expect_version; retry if someone wrote in between.
    for _ in range(5):
        try:
            row = call("get_row", {"table": TABLE, "id": date})
        except EngineRefused as e:
            if e.error.code != "not_found":
                raise
            try:
                r = call("insert_row", {"table": TABLE, "id": date,
                                        "values": {"date": date, "tags": tags},
                                        "body": line + "\n"})
                return {"date": date, "version": r["version"], "entries": 1}
            except EngineRefused as e2:
                if e2.error.status == 409:
                    continue
                raise
        body = (row.get("body") or "").rstrip("\n")
        body = (body + "\n" if body else "") + line + "\n"
        values = {}
        old_tags = row.get("values", {}).get("tags") or []
        merged = old_tags + [t for t in tags if t not in old_tags]
        if merged != old_tags:
            values["tags"] = merged
        try:
            r = call("update_row", {"table": TABLE, "id": date, "values": values,
                                    "body": body, "expect_version": row["version"]})
        except EngineRefused as e:
            if e.error.status == 409:
                continue
            raise
        entries = sum(1 for ln in body.splitlines() if ln.startswith("- "))
        return {"date": date, "version": r["version"], "entries": entries}
    raise ValueError("the day's entry kept changing; try again")


def read(args: dict) -> dict:
    date = check_date(args.get("date") or today())
    try:
        row = call("get_row", {"table": TABLE, "id": date})
    except EngineRefused as e:
        if e.error.code == "not_found":
            return {"date": date, "entries": [], "tags": []}
        raise
    lines = [ln[2:] for ln in (row.get("body") or "").splitlines() if ln.startswith("- ")]
    return {"date": date, "entries": lines, "tags": row.get("values", {}).get("tags") or []}


def recent(args: dict) -> dict:
    days = int(args.get("days") or 7)
    try:
        r = call("select_rows", {"table": TABLE, "order_by": [{"column": "date", "dir": "desc"}],
                                 "limit": max(1, min(days, 100))})
    except EngineRefused as e:
        if e.error.code == "not_found":
            return {"days": []}
        raise
    out = []
    for row in r["rows"]:
        full = call("get_row", {"table": TABLE, "id": row["id"]})
        lines = [ln for ln in (full.get("body") or "").splitlines() if ln.startswith("- ")]
        out.append({"date": row["id"], "entries": len(lines),
                    "first": lines[0][2:] if lines else None,
                    "tags": row["values"].get("tags") or []})
    return {"days": out}


def search(args: dict) -> dict:
    query = str(args.get("query") or "").strip()
    if not query:
        raise ValueError("give words to search for")
    try:
        r = call("search_notes", {"query": query, "tables": [TABLE],
                                  "limit": int(args.get("limit") or 20)})
    except EngineRefused as e:
        if e.error.code == "not_found":
            return {"hits": []}
        raise
    return {"hits": [{"date": h["id"], "snippet": h.get("snippet"), "score": h.get("score")}
                     for h in r["hits"]]}


TOOLS = {
    "journal_append": (append, "Append an entry (a line of text) to the daily journal in "
                       "personal.notes.daily, for today (UTC) or a given date. Answers the day and "
                       "how many entries it has.",
                       {"type": "object", "properties": {
                           "text": {"type": "string", "description": "The entry"},
                           "date": {"type": "string", "description": "YYYY-MM-DD; today by default"},
                           "tags": {"type": "array", "items": {"type": "string"},
                                    "description": "Tags for the day"}},
                        "required": ["text"]}),
    "journal_read": (read, "Read one day of the journal: its entries and tags.",
                     {"type": "object", "properties": {
                         "date": {"type": "string", "description": "YYYY-MM-DD; today by default"}}}),
    "journal_recent": (recent, "The most recent journal days, newest first, with their entry "
                       "counts and first entry.",
                       {"type": "object", "properties": {
                           "days": {"type": "integer", "minimum": 1, "maximum": 100}}}),
    "journal_search": (search, "Full-text search in the journal; answers matching days with a snippet.",
                       {"type": "object", "properties": {
                           "query": {"type": "string"},
                           "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
                        "required": ["query"]}),
}


class Tools(exports.Tools):
    def list_tools(self) -> list[Tool]:
        return [Tool(name=name, description=desc, input_schema=json.dumps(schema), tables=[TABLE])
                for name, (_, desc, schema) in TOOLS.items()]

    def instructions(self) -> str:
        return ("journal keeps a daily journal in personal.notes.daily: journal_append to note "
                "something, journal_read for a day, journal_recent for the last days, "
                "journal_search to find past entries.")

    def call_tool(self, name: str, arguments: str, ctx: CallContext) -> str:
        entry = TOOLS.get(name)
        if entry is None:
            raise Err(f"journal has no tool {name}")
        try:
            args = json.loads(arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("the arguments must be an object")
            return json.dumps(entry[0](args))
        except EngineRefused as e:
            # The engine's error, intact: it says which rule broke and how to fix it.
            raise Err(e.error.json)
        except (ValueError, KeyError, TypeError) as e:
            raise Err(str(e))
