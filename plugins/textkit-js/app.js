// textkit: a typed component in JavaScript (componentize-js). Each function the world exports
// is an exported JavaScript function (its WIT name in camelCase); datanotes makes each a tool,
// checks and converts its arguments from the WIT types, and answers its result as JSON.

const words = (text) => text.split(/\s+/).filter((w) => w.length > 0);

export function slugify(title) {
  return title
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
}

// A record is answered as an object with its fields.
export function count(text) {
  return {
    words: words(text).length,
    lines: text.length === 0 ? 0 : text.split('\n').length,
    chars: [...text].length,
  };
}

// A `result`: the value returned is `ok`; a thrown value (not an Error) is `err`.
export function word(text, n) {
  const w = words(text);
  if (n >= w.length) {
    throw `the text has ${w.length} word${w.length === 1 ? '' : 's'}, no word ${n}`;
  }
  return w[n];
}
