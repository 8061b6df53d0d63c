// bookmarks: a datanotes WASM app in JavaScript (componentize-js).
//
// Links worth keeping, in the table `personal.notes.bookmarks`: a row per URL, with a title,
// tags and a note (the row's Markdown body). Everything goes through the engine import, with
// the app's own rights (install it with write ["personal.notes.bookmarks"] and ddl true, so it
// can create its table on first use).

import { call as engineCall } from 'datanotes:app/engine@0.1.0';
import { log } from 'datanotes:app/log@0.1.0';

const TABLE = 'personal.notes.bookmarks';

// An engine refusal, with the engine's error record ({status, code, message, json}).
class Refused extends Error {
  constructor(e) {
    super(e.message);
    this.engine = e;
  }
}

function call(op, args) {
  try {
    return JSON.parse(engineCall(op, JSON.stringify(args)));
  } catch (e) {
    // An imported function's `err` arrives as a thrown error carrying it in `payload`.
    if (e && e.payload && typeof e.payload.status === 'number') throw new Refused(e.payload);
    throw e;
  }
}

function ensureTable() {
  try {
    call('describe_table', { table: TABLE });
  } catch (e) {
    if (!(e instanceof Refused) || e.engine.code !== 'not_found') throw e;
    call('create_table', {
      table: TABLE,
      description: 'Links worth keeping: URL, title, tags; the note is the body',
      columns: {
        url: { type: 'text', required: true, unique: true, pattern: '^https?://\\S+$' },
        title: { type: 'text' },
        tags: { type: 'list' },
      },
    });
    log('info', `created ${TABLE}`);
  }
}

const cleanTags = (tags) => [...new Set((tags || []).map((t) => String(t).trim().toLowerCase()).filter(Boolean))];

function byUrl(url) {
  const r = call('select_rows', { table: TABLE, where: [{ column: 'url', op: '=', value: url }], limit: 1 });
  return r.rows[0];
}

function add(args) {
  const url = String(args.url || '').trim();
  if (!url) throw 'give the url';
  const tags = cleanTags(args.tags);
  ensureTable();
  const existing = byUrl(url);
  if (existing) {
    // Known already: merge the tags, replace the title or note if given.
    const values = { tags: cleanTags([...(existing.values.tags || []), ...tags]) };
    if (args.title) values.title = String(args.title);
    const update = { table: TABLE, id: existing.id, values, expect_version: existing.version };
    if (args.note) update.body = String(args.note);
    const r = call('update_row', update);
    return { id: existing.id, version: r.version, added: false, tags: values.tags };
  }
  const title = String(args.title || url.replace(/^https?:\/\//, ''));
  const insert = { table: TABLE, values: { url, title, tags } };
  if (args.note) insert.body = String(args.note);
  const r = call('insert_row', insert);
  return { id: r.id, version: r.version, added: true, tags };
}

function rowOut(row) {
  return { id: row.id, url: row.values.url, title: row.values.title, tags: row.values.tags || [] };
}

function search(args) {
  const query = String(args.query || '').trim();
  if (!query) throw 'give words to search for';
  let hits;
  try {
    hits = call('search_notes', { query, tables: [TABLE], limit: Number(args.limit || 20) }).hits;
  } catch (e) {
    if (e instanceof Refused && e.engine.code === 'not_found') return { bookmarks: [] };
    throw e;
  }
  const bookmarks = hits.map((h) => {
    const row = call('get_row', { table: TABLE, id: h.id });
    return { ...rowOut(row), snippet: h.snippet };
  });
  return { bookmarks };
}

function byTag(args) {
  const tag = String(args.tag || '').trim().toLowerCase();
  if (!tag) throw 'give a tag';
  try {
    const r = call('select_rows', {
      table: TABLE,
      where: [{ column: 'tags', op: 'contains', value: tag }],
      order_by: [{ column: 'title', dir: 'asc' }],
      limit: 100,
    });
    return { tag, bookmarks: r.rows.map(rowOut) };
  } catch (e) {
    if (e instanceof Refused && e.engine.code === 'not_found') return { tag, bookmarks: [] };
    throw e;
  }
}

function tags() {
  const counts = {};
  let offset = 0;
  try {
    for (;;) {
      const r = call('select_rows', { table: TABLE, columns: ['tags'], limit: 500, offset });
      for (const row of r.rows) for (const t of row.values.tags || []) counts[t] = (counts[t] || 0) + 1;
      offset += r.rows.length;
      if (r.rows.length === 0 || offset >= r.total) break;
    }
  } catch (e) {
    if (!(e instanceof Refused && e.engine.code === 'not_found')) throw e;
  }
  const list = Object.entries(counts).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  return { tags: list.map(([tag, count]) => ({ tag, count })) };
}

const TOOLS = {
  bookmarks_add: {
    run: add,
    description: `Save a link in ${TABLE} with a title, tags and a note. Saving a known URL again merges its tags.`,
    schema: {
      type: 'object',
      properties: {
        url: { type: 'string', description: 'http(s) URL' },
        title: { type: 'string' },
        tags: { type: 'array', items: { type: 'string' } },
        note: { type: 'string', description: 'Why it is worth keeping (Markdown)' },
      },
      required: ['url'],
    },
  },
  bookmarks_search: {
    run: search,
    description: 'Full-text search over saved links (titles, URLs, notes).',
    schema: {
      type: 'object',
      properties: { query: { type: 'string' }, limit: { type: 'integer', minimum: 1, maximum: 100 } },
      required: ['query'],
    },
  },
  bookmarks_by_tag: {
    run: byTag,
    description: 'The saved links with a tag, by title.',
    schema: { type: 'object', properties: { tag: { type: 'string' } }, required: ['tag'] },
  },
  bookmarks_tags: {
    run: tags,
    description: 'Every tag in use, with how many links carry it, most used first.',
    schema: { type: 'object', properties: {} },
  },
};

export const tools = {
  listTools() {
    return Object.entries(TOOLS).map(([name, t]) => ({
      name,
      description: t.description,
      inputSchema: JSON.stringify(t.schema),
      tables: [TABLE],
    }));
  },

  instructions() {
    return `bookmarks keeps links in ${TABLE}: bookmarks_add to save one (with tags and a note), ` +
      'bookmarks_search to find one, bookmarks_by_tag and bookmarks_tags to browse.';
  },

  // `err` (a thrown string) is shown to the agent as an error result.
  callTool(name, argsText, ctx) {
    const tool = TOOLS[name];
    if (!tool) throw `bookmarks has no tool ${name}`;
    let args;
    try {
      args = JSON.parse(argsText || '{}');
    } catch (e) {
      throw `the arguments are not JSON: ${e.message}`;
    }
    try {
      return JSON.stringify(tool.run(args || {}));
    } catch (e) {
      if (e instanceof Refused) throw e.engine.json; // the engine's error, intact
      if (typeof e === 'string') throw e;
      throw `bookmarks failed: ${e && e.message ? e.message : e}`;
    }
  },
};
