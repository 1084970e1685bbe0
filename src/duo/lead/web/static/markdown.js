// A small Markdown renderer that builds DOM nodes and never parses HTML.
//
// Model text is untrusted: every character of it reaches the page through a text node
// (document.createTextNode), so `<script>` or `<img onerror=...>` stays text. Supported:
// fenced code blocks (with a copy button, and syntax colours where prism.js knows the
// language), headings, bullet and numbered lists, quotes, pipe tables, rules, paragraphs,
// `code`, **bold**, *italic*, and [links](https://...) to http(s) addresses only (any other
// scheme stays text), which open in a new tab without the page as their opener.
//
// Every piece of visible text is a range of the source string, so the caller can colour
// ranges: `leaf(parent, start, end)` is called for each, and decides how to show it.
"use strict";

(function () {
  const FENCE = /^ {0,3}(```|~~~)\s*([\w+#.-]*)\s*$/;
  const HEADING = /^ {0,3}(#{1,6})\s+/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+/;
  const QUOTE = /^ {0,3}>\s?/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
  const TABLE_RULE = /^ {0,3}\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;
  const INLINE = [
    { re: /`([^`\n]+)`/, tag: "code" },
    { re: /(?<!!)\[([^\]\n]+)\]\((https?:\/\/[^\s()<>"]+)\)/, tag: "a" },
    { re: /\*\*([^*\n]+?)\*\*/, tag: "strong" },
    { re: /__([^_\n]+?)__/, tag: "strong" },
    { re: /(?<![\w*])\*([^*\s][^*\n]*?)\*(?![\w*])/, tag: "em" },
    { re: /(?<![\w_])_([^_\s][^_\n]*?)_(?![\w_])/, tag: "em" },
  ];

  function el(tag, cls) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    return node;
  }

  // The lines of text with their offsets: [{start, end}] (end excludes the newline).
  function lines(text) {
    const out = [];
    let start = 0;
    for (;;) {
      const nl = text.indexOf("\n", start);
      if (nl < 0) {
        out.push({ start, end: text.length });
        return out;
      }
      out.push({ start, end: nl });
      start = nl + 1;
    }
  }

  function inline(text, parent, start, end, leaf) {
    while (start < end) {
      const rest = text.slice(start, end);
      let best = null;
      for (const rule of INLINE) {
        const m = rule.re.exec(rest);
        if (m && (best === null || m.index < best.m.index)) best = { m, rule };
      }
      if (best === null) {
        leaf(parent, start, end);
        return;
      }
      const { m, rule } = best;
      if (m.index > 0) leaf(parent, start, start + m.index);
      const node = el(rule.tag);
      if (rule.tag === "a") {
        node.setAttribute("href", m[2]); // an attribute's text: never parsed as HTML
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer nofollow");
      }
      const innerStart = start + m.index + m[0].indexOf(m[1]);
      if (rule.tag === "code") leaf(node, innerStart, innerStart + m[1].length);
      else inline(text, node, innerStart, innerStart + m[1].length, leaf);
      parent.appendChild(node);
      start += m.index + m[0].length;
    }
  }

  // text[start:end], a code block's body, into `code`: in spans of Prism's token classes
  // where Prism (prism.js) knows the language, each piece still shown by `leaf`; as plain
  // leaves where it does not. Prism only splits the text (Prism.tokenize): it never writes
  // HTML here.
  function highlighted(code, text, start, end, lang, leaf) {
    const prism = (typeof window !== "undefined" && window.Prism) || null;
    const grammar = prism && lang ? prism.languages[lang.toLowerCase()] : null;
    if (!grammar) {
      leaf(code, start, end);
      return;
    }
    for (const [a, b, types] of tokenRanges(prism.tokenize(text.slice(start, end), grammar))) {
      if (!types.length) {
        leaf(code, start + a, start + b);
        continue;
      }
      const span = el("span", "token " + types.join(" "));
      leaf(span, start + a, start + b);
      code.appendChild(span);
    }
  }

  // Prism's token stream as [start, end, [type, alias, ...]] ranges of its text.
  function tokenRanges(tokens, at = 0, types = [], out = []) {
    for (const t of Array.isArray(tokens) ? tokens : [tokens]) {
      if (typeof t === "string") {
        if (t) out.push([at, at + t.length, types]);
        at += t.length;
        continue;
      }
      const inner = types.concat([t.type], t.alias ? [].concat(t.alias) : []);
      const before = out.length;
      tokenRanges(t.content, at, inner, out);
      at = out.length > before ? out[out.length - 1][1] : at;
    }
    return out;
  }

  function codeBlock(text, rows, i, leaf, copy) {
    const open = FENCE.exec(text.slice(rows[i].start, rows[i].end));
    const wrap = el("div", "code");
    const bar = el("div", "code-bar");
    const lang = el("span", "lang");
    lang.textContent = open[2] || "code";
    bar.appendChild(lang);
    const pre = el("pre");
    const code = el("code");
    pre.appendChild(code);
    let j = i + 1;
    for (; j < rows.length; j++) {
      const row = text.slice(rows[j].start, rows[j].end);
      if (/^ {0,3}(```|~~~)\s*$/.test(row) && row.trim()[0] === open[1][0]) break;
    }
    if (j > i + 1) highlighted(code, text, rows[i + 1].start, rows[j - 1].end, open[2], leaf);
    bar.appendChild(copy(() => code.textContent));
    wrap.append(bar, pre);
    return { node: wrap, next: j + 1 };
  }

  // The cells of a table row text[start:end]: [start, end] of each, trimmed, the outer
  // pipes left out; a pipe after a backslash is text.
  function cells(text, start, end) {
    const out = [];
    let from = start;
    const push = (a, b) => {
      while (a < b && /\s/.test(text[a])) a++;
      while (b > a && /\s/.test(text[b - 1])) b--;
      out.push([a, b]);
    };
    for (let at = start; at < end; at++) {
      if (text[at] === "|" && text[at - 1] !== "\\") {
        push(from, at);
        from = at + 1;
      }
    }
    push(from, end);
    if (text.slice(start, end).trim().startsWith("|")) out.shift();
    if (text.slice(start, end).trim().endsWith("|") && out.length > 1) out.pop();
    return out;
  }

  function tableRow(text, row, cellTag, leaf) {
    const tr = el("tr");
    for (const [a, b] of cells(text, row.start, row.end)) {
      const cell = el(cellTag);
      inline(text, cell, a, b, leaf);
      tr.appendChild(cell);
    }
    return tr;
  }

  function table(text, rows, i, leaf) {
    const node = el("table");
    const head = el("thead");
    head.appendChild(tableRow(text, rows[i], "th", leaf));
    node.appendChild(head);
    const body = el("tbody");
    let j = i + 2;
    for (; j < rows.length && text.slice(rows[j].start, rows[j].end).includes("|"); j++) {
      body.appendChild(tableRow(text, rows[j], "td", leaf));
    }
    node.appendChild(body);
    const wrap = el("div", "table");
    wrap.appendChild(node);
    return { node: wrap, next: j };
  }

  // Render `text` into a DocumentFragment. leaf(parent, start, end) shows text[start:end];
  // copy(getText) makes a copy button.
  function render(text, leaf, copy) {
    const root = document.createDocumentFragment();
    const rows = lines(text);
    let para = null;
    let list = null;
    const close = () => {
      para = null;
      list = null;
    };
    for (let i = 0; i < rows.length; ) {
      const { start, end } = rows[i];
      const row = text.slice(start, end);
      if (FENCE.test(row)) {
        close();
        const block = codeBlock(text, rows, i, leaf, copy);
        root.appendChild(block.node);
        i = block.next;
        continue;
      }
      const next = rows[i + 1] ? text.slice(rows[i + 1].start, rows[i + 1].end) : "";
      if (row.includes("|") && TABLE_RULE.test(next) && next.includes("|")) {
        close();
        const block = table(text, rows, i, leaf);
        root.appendChild(block.node);
        i = block.next;
        continue;
      }
      i += 1;
      if (row.trim() === "") {
        close();
        continue;
      }
      if (RULE.test(row)) {
        close();
        root.appendChild(el("hr"));
        continue;
      }
      let m = HEADING.exec(row);
      if (m) {
        close();
        const h = el(`h${Math.min(6, m[1].length + 2)}`);
        inline(text, h, start + m[0].length, end, leaf);
        root.appendChild(h);
        continue;
      }
      m = ITEM.exec(row);
      if (m) {
        para = null;
        const ordered = /\d/.test(m[2]);
        const tag = ordered ? "ol" : "ul";
        if (list === null || list.tagName.toLowerCase() !== tag) {
          list = el(tag);
          if (ordered) list.start = parseInt(m[2], 10);
          root.appendChild(list);
        }
        const li = el("li");
        inline(text, li, start + m[0].length, end, leaf);
        list.appendChild(li);
        continue;
      }
      m = QUOTE.exec(row);
      if (m) {
        close();
        const q = el("blockquote");
        inline(text, q, start + m[0].length, end, leaf);
        root.appendChild(q);
        continue;
      }
      if (list !== null && /^\s+\S/.test(row)) {
        // a continuation line of the last list item
        const li = list.lastChild;
        li.appendChild(document.createTextNode("\n"));
        inline(text, li, start, end, leaf);
        continue;
      }
      list = null;
      if (para === null) {
        para = el("p");
        root.appendChild(para);
      } else {
        para.appendChild(document.createTextNode("\n"));
      }
      inline(text, para, start, end, leaf);
    }
    return root;
  }

  window.duoMarkdown = { render };
})();
