// Makes a component for wit/datanotes-app.wit out of a core module in WebAssembly text: parse,
// embed the world's types, `component new` (wasm-tools, as jco ships it). Used by
// scripts/build-plugins for the hand-written test components in plugins/test-apps/wat.
//
//   node wat-component.mjs TOOLS_DIR IN.wat WIT_FILE OUT.wasm
import { readFile, writeFile } from "node:fs/promises";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [tools, input, wit, output] = process.argv.slice(2);
const wt = await import(
    pathToFileURL(join(tools, "node_modules/@bytecodealliance/jco-transpile/dist/wasm-tools.js")).href
);
const core = await wt.parse(await readFile(input, "utf8"));
const embedded = await wt.componentEmbed({
    binary: core,
    witSource: await readFile(wit, "utf8"),
    world: "app",
});
await writeFile(output, await wt.componentNew(embedded));
