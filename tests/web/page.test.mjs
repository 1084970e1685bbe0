// The page's pure parts: sources (labels, stable colours, kinds) and chats (export and
// import), from src/duo/lead/web/static/{sources,chats}.js.
//
// Run: node --test tests/web/*.test.mjs (pytest runs it too: tests/unit/lead/web/test_static.py).

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test } from "node:test";

const require = createRequire(import.meta.url);
const sources = require("../../src/duo/lead/web/static/sources.js");
const chats = require("../../src/duo/lead/web/static/chats.js");

test("a source's colour depends on the source alone, not on what came before", () => {
  const names = ["back:gpu-box", "back:laptop", "model", "ngram", "suffix"];
  const first = names.map(sources.colourOf);
  const reversed = [...names].reverse().map(sources.colourOf).reverse();
  assert.deepEqual(first, reversed);
  for (const c of first) assert.ok(Number.isInteger(c) && c >= 0 && c < 8);
  assert.notEqual(sources.colourOf("back:gpu-box"), sources.colourOf("back:laptop"));
});

test("each kind has its underline, and a label", () => {
  assert.equal(sources.kindOf("back:x"), "back");
  assert.equal(sources.kindOf("model"), "model");
  assert.equal(sources.kindOf("ngram"), "ngram");
  assert.equal(sources.kindOf("suffix"), "suffix");
  assert.equal(sources.kindOf(null), "main");
  assert.match(sources.classes("back:x"), /^tok src-\d kind-back$/);
  assert.equal(sources.label("back:gpu"), "back gpu");
  assert.equal(sources.label("ngram"), "n-gram lookup");
});

test("an export imports back as the same chats", () => {
  const mine = [
    { id: "1", title: "Hello", messages: [
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello!", segments: [{ text: "Hel", source: "back:a" }, { text: "lo!", source: null }] },
    ] },
  ];
  const back = chats.parseExport(chats.exported(mine));
  assert.deepEqual(back, mine);
});

test("a bad import is refused with a reason, and ids stay unique", () => {
  assert.throws(() => chats.parseExport("nope"), /not JSON/);
  assert.throws(() => chats.parseExport('{"chats": []}'), /not an export/);
  assert.throws(
    () => chats.parseExport('{"duo_chats": 1, "chats": [{"title": "t", "messages": [{"role": "system", "content": "x"}]}]}'),
    /chat 1, message 1: needs a role/,
  );
  const here = [{ id: "1", title: "a", messages: [] }];
  const all = chats.merged(here, [{ id: "1", title: "b", messages: [] }]);
  assert.equal(all.length, 2);
  assert.notEqual(all[0].id, all[1].id);
});
