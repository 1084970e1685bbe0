// Where a piece of an answer came from, and how the page shows it: a label, a colour that
// is the same on every load (derived from the source's kind and name, not from the order
// sources appear in), and a second cue that is not colour: an underline whose style says
// the kind of drafter (solid: a back; dashed: the lead's own draft model; dotted: n-gram
// lookup; double: the suffix cache).
"use strict";

(function (root) {
  const MAIN = "main";
  const COLOURS = 8; // .src-0 ... .src-7 in style.css
  const KINDS = { back: "back", model: "model", ngram: "ngram", suffix: "suffix" };

  function kindOf(source) {
    if (!source || source === MAIN) return "main";
    if (source.startsWith("back:")) return "back";
    return KINDS[source] || "other";
  }

  function label(source) {
    if (!source || source === MAIN) return "main model";
    if (source.startsWith("back:")) return "back " + source.slice(5);
    return { model: "local draft model", ngram: "n-gram lookup", suffix: "suffix cache" }[source] || source;
  }

  // FNV-1a over the source's text: a stable colour per source, spread over the palette.
  function colourOf(source) {
    let hash = 0x811c9dc5;
    for (let i = 0; i < source.length; i++) {
      hash ^= source.charCodeAt(i);
      hash = Math.imul(hash, 0x01000193) >>> 0;
    }
    return hash % COLOURS;
  }

  // The class names of a source's highlight: its colour and its kind's underline.
  function classes(source) {
    return `tok src-${colourOf(source)} kind-${kindOf(source)}`;
  }

  const api = { MAIN, kindOf, label, colourOf, classes };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  else root.duoSources = api;
})(typeof window !== "undefined" ? window : globalThis);
