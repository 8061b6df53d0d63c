// bookmarks2: the bookmarks app on the world 0.2 (wit/0.2), in JavaScript (componentize-js).
//
// Links in the table `personal.notes.bookmarks`, a row per URL with a title and tags. Besides its
// tools, it reports progress and learns of cancellation (`bookmarks_retag`), and offers
// resources (every link, and the links of a tag through a template) and a prompt (a reading
// plan). Install it with write ["personal.notes.bookmarks"] and ddl true.

import { call as engineCall, progress, cancelled } from 'datanotes:app/engine@0.2.0';

const TABLE = 'personal.notes.bookmarks';

// An engine refusal arrives as a thrown error carrying the engine's error in `payload`.
function call(op, args) {
  try {
    return JSON.parse(engineCall(op, JSON.stringify(args)));
  } catch (e) {
    if (e && e.payload && typeof e.payload.json === 'string') throw e.payload.json;
    throw e;
  }
}

function rows(where) {
  try {
    call('describe_table', { table: TABLE });
  } catch (e) {
    return [];
  }
  return call('select_rows', { table: TABLE, where: where || [], order_by: [{ column: 'title', dir: 'asc' }], limit: 500 }).rows;
}

function add(args) {
  try {
    call('describe_table', { table: TABLE });
  } catch (e) {
    call('create_table', {
      table: TABLE,
      description: 'Links worth keeping: URL, title, tags',
      columns: { url: { type: 'text', required: true, unique: true }, title: { type: 'text' }, tags: { type: 'list' } },
    });
  }
  const url = String(args.url || '');
  const values = { url, title: String(args.title || url), tags: (args.tags || []).map((t) => String(t).toLowerCase()) };
  const r = call('insert_row', { table: TABLE, values });
  return { id: r.id, version: r.version };
}

// Lower-cases every link's tags, one link after another: progress after each, and it stops
// when the caller cancels.
function retag() {
  const all = rows();
  let changed = 0;
  for (let i = 0; i < all.length; i++) {
    if (cancelled()) return { done: i, changed, cancelled: true };
    const row = all[i];
    const tags = (row.values.tags || []).map((t) => t.toLowerCase());
    if (JSON.stringify(tags) !== JSON.stringify(row.values.tags || [])) {
      call('update_row', { table: TABLE, id: row.id, values: { tags }, expect_version: row.version });
      changed++;
    }
    progress(i + 1, all.length, `retagged ${row.values.url}`);
  }
  return { done: all.length, changed, cancelled: false };
}

const markdown = (list) => list.map((r) => `- [${r.values.title}](${r.values.url})`).join('\n') + '\n';

const TOOLS = {
  bookmarks_add: {
    run: add,
    description: `Save a link in ${TABLE} with a title and tags.`,
    schema: {
      type: 'object',
      properties: { url: { type: 'string' }, title: { type: 'string' }, tags: { type: 'array', items: { type: 'string' } } },
      required: ['url'],
    },
  },
  bookmarks_retag: { run: retag, description: 'Lower-case the tags of every link, with progress.', schema: { type: 'object', properties: {} } },
};

export const tools = {
  listTools() {
    return Object.entries(TOOLS).map(([name, t]) => ({ name, description: t.description, inputSchema: JSON.stringify(t.schema), tables: [TABLE] }));
  },
  instructions() {
    return `bookmarks keeps links in ${TABLE}: bookmarks_add to save one; read bookmarks://all, or bookmarks://tag/{tag}.`;
  },
  // A thrown string is the `err`: shown to the agent as an error result.
  callTool(name, argsText, ctx) {
    const tool = TOOLS[name];
    if (!tool) throw `bookmarks has no tool ${name}`;
    return JSON.stringify(tool.run(JSON.parse(argsText || '{}')));
  },
};

export const resources = {
  listResources() {
    return [{ uri: 'bookmarks://all', name: 'All links', description: 'Every saved link, by title', mimeType: 'text/markdown' }];
  },
  listResourceTemplates() {
    return [{ uriTemplate: 'bookmarks://tag/{tag}', name: 'Links of a tag', description: 'The links with a tag', mimeType: 'text/markdown' }];
  },
  readResource(uri, ctx) {
    let list;
    if (uri === 'bookmarks://all') list = rows();
    else if (uri.startsWith('bookmarks://tag/')) list = rows([{ column: 'tags', op: 'contains', value: uri.slice('bookmarks://tag/'.length) }]);
    else throw `no resource ${uri}`;
    return JSON.stringify({ contents: [{ uri, mimeType: 'text/markdown', text: markdown(list) }] });
  },
};

export const prompts = {
  listPrompts() {
    return [{ name: 'bookmarks_reading_plan', description: 'Plan what to read next', arguments: [{ name: 'minutes', description: 'Time available', required: true }] }];
  },
  getPrompt(name, args, ctx) {
    if (name !== 'bookmarks_reading_plan') throw `no prompt ${name}`;
    const minutes = (args.find(([k]) => k === 'minutes') || [])[1] || '30';
    const text = `My saved links:\n\n${markdown(rows())}\nI have ${minutes} minutes: what should I read, in which order?`;
    return JSON.stringify({ messages: [{ role: 'user', content: { type: 'text', text } }] });
  },
};
