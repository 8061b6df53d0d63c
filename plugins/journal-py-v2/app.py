"""journal2: the journal app on the world 0.2 (wit/0.2), in Python (componentize-py).

Entries go to the table `personal.notes.daily`, one row a day (its id is the date), one line per
entry in the row's Markdown body. Besides its tools, it reports progress and learns of
cancellation (`journal_tally`), and offers resources (today's page, and any day's through a
template) and a prompt (reflect on the last days). Install it with write
["personal.notes.daily"] and ddl true.
"""

import json
import time
from datetime import datetime, timezone

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import engine
from wit_world.imports.types import (CallContext, EngineError, Prompt, PromptArgument, Resource,
                                     ResourceTemplate, Tool)

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


def today() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d")


def day(date: str) -> str:
    """A day's page as Markdown (empty when there is none)."""
    try:
        return call("get_row", {"table": TABLE, "id": date}).get("body") or ""
    except EngineRefused as e:
        if e.error.code == "not_found":
            return ""
        raise


def append(args: dict) -> dict:
    text = str(args.get("text") or "").strip()
    if not text:
        raise ValueError("give the entry's text")
    date = today()
    line = f"- {datetime.now(timezone.utc).strftime('%H:%M')} {text}\n"
    try:
        call("describe_table", {"table": TABLE})
    except EngineRefused:
        call("create_table", {"table": TABLE, "description": "A daily journal",
                              "columns": {"date": {"type": "date", "required": True, "unique": True},
                                          "tags": {"type": "list"}}})
    try:
        row = call("get_row", {"table": TABLE, "id": date})
    except EngineRefused:
        r = call("insert_row", {"table": TABLE, "id": date, "values": {"date": date}, "body": line})
        return {"date": date, "version": r["version"]}
    r = call("update_row", {"table": TABLE, "id": date, "body": (row.get("body") or "") + line,
                            "expect_version": row["version"]})
    return {"date": date, "version": r["version"]}


def tally(args: dict) -> dict:
    """Counts the words of every day, one day after another: progress after each day, and it
    stops when the caller cancels."""
    try:
        rows = call("select_rows", {"table": TABLE, "limit": 1000})["rows"]
    except EngineRefused:
        rows = []
    words = 0
    pause = float(args.get("pause") or 0)
    for i, row in enumerate(rows):
        if engine.cancelled():
            return {"days": i, "words": words, "cancelled": True}
        words += len(day(row["id"]).split())
        engine.progress(i + 1, len(rows), f"counted {row['id']}")
        if pause:
            time.sleep(pause)
    return {"days": len(rows), "words": words, "cancelled": False}


TOOLS = {
    "journal_append": (append, "Append an entry to today's page of the journal (UTC).",
                       {"type": "object", "properties": {"text": {"type": "string"}},
                        "required": ["text"]}),
    "journal_tally": (tally, "Count the words of the whole journal, day by day, with progress.",
                      {"type": "object", "properties": {
                          "pause": {"type": "number", "minimum": 0, "maximum": 1,
                                    "description": "Seconds to rest after each day"}}}),
}


class Tools(exports.Tools):
    def list_tools(self) -> list[Tool]:
        return [Tool(name=name, description=desc, input_schema=json.dumps(schema), tables=[TABLE])
                for name, (_, desc, schema) in TOOLS.items()]

    def instructions(self) -> str:
        return ("journal keeps a daily journal in personal.notes.daily: journal_append to note "
                "something; read journal://today, or journal://day/{date} for another day.")

    def call_tool(self, name: str, arguments: str, ctx: CallContext) -> str:
        entry = TOOLS.get(name)
        if entry is None:
            raise Err(f"journal has no tool {name}")
        try:
            return json.dumps(entry[0](json.loads(arguments or "{}")))
        except EngineRefused as e:
            raise Err(e.error.json)
        except (ValueError, KeyError, TypeError) as e:
            raise Err(str(e))


class Resources(exports.Resources):
    def list_resources(self) -> list[Resource]:
        return [Resource(uri="journal://today", name="Today",
                         description="Today's page of the journal (UTC)", mime_type="text/markdown")]

    def list_resource_templates(self) -> list[ResourceTemplate]:
        return [ResourceTemplate(uri_template="journal://day/{date}", name="A day",
                                 description="One day's page, by date (YYYY-MM-DD)",
                                 mime_type="text/markdown")]

    def read_resource(self, uri: str, ctx: CallContext) -> str:
        if uri == "journal://today":
            date = today()
        elif uri.startswith("journal://day/"):
            date = uri.removeprefix("journal://day/")
        else:
            raise Err(f"no resource {uri}")
        text = f"# {date}\n\n" + (day(date) or "Nothing written.\n")
        return json.dumps({"contents": [{"uri": uri, "mimeType": "text/markdown", "text": text}]})


class Prompts(exports.Prompts):
    def list_prompts(self) -> list[Prompt]:
        return [Prompt(name="journal_reflect", description="Reflect on today's page",
                       arguments=[PromptArgument(name="mood", description="How the day felt",
                                                 required=False)])]

    def get_prompt(self, name: str, arguments: list[tuple[str, str]], ctx: CallContext) -> str:
        if name != "journal_reflect":
            raise Err(f"no prompt {name}")
        mood = dict(arguments).get("mood")
        text = "Here is my journal for today:\n\n" + (day(today()) or "(nothing yet)\n")
        text += "\nWhat stands out, and what should I do tomorrow?"
        if mood:
            text += f" The day felt {mood}."
        return json.dumps({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]})
