// tools/mermaid/check.mjs - parses Mermaid diagrams with mermaid's own parser
// (mermaid.parse) under Node.js: jsdom stands in for the browser mermaid
// expects (DOMPurify reads window at import). Usage: node check.mjs FILE...
// ("-" reads stdin); exits 1 with the parser's message on the first diagram
// that does not parse, 2 on a usage error, 0 when every one parses.
import { readFileSync } from "node:fs";
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!DOCTYPE html><html><body></body></html>", { pretendToBeVisual: true });
globalThis.window = dom.window;
globalThis.document = dom.window.document;
for (const name of ["DOMParser", "Element", "HTMLElement", "SVGElement", "Node", "navigator"]) {
  if (globalThis[name] === undefined) {
    Object.defineProperty(globalThis, name, { value: dom.window[name], configurable: true, writable: true });
  }
}

const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });

const files = process.argv.slice(2);
if (files.length === 0) {
  process.stderr.write("usage: node check.mjs FILE... (- for stdin)\n");
  process.exit(2);
}
for (const file of files) {
  const text = readFileSync(file === "-" ? 0 : file, "utf8");
  try {
    const result = await mermaid.parse(text);
    process.stdout.write(`${file}: ok (${result.diagramType})\n`);
  } catch (err) {
    process.stderr.write(`${file}: ${err && err.message ? err.message : String(err)}\n`);
    process.exit(1);
  }
}
