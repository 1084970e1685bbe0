// The web page's Markdown renderer (src/duo/lead/web/static/markdown.js): model text
// becomes structure through DOM calls alone, and every character of it stays text.
//
// Run: node --test tests/web/*.test.mjs (pytest runs it too: tests/unit/lead/web/test_static.py).

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { document, elements, html, load } from "./dom.mjs";

const window = load("markdown.js");
const { render } = window.duoMarkdown;

// The tags the renderer makes (BUTTON: the copy button, made by the page's `copy`).
const TAGS = new Set(
  ["P", "H3", "H4", "H5", "H6", "UL", "OL", "LI", "BLOCKQUOTE", "HR"].concat(
    ["DIV", "SPAN", "PRE", "CODE", "STRONG", "EM", "BUTTON"],
  ),
);

function copyButton(getText) {
  const button = document.createElement("button");
  button.className = "copy";
  button.getText = getText;
  return button;
}

// Render as the page does for text of no known origin: each leaf, text[start:end], as a
// text node. Returns the fragment and the leaves' ranges.
function rendered(text) {
  const leaves = [];
  const leaf = (parent, start, end) => {
    leaves.push([start, end]);
    parent.appendChild(document.createTextNode(text.slice(start, end)));
  };
  return { root: render(text, leaf, copyButton), leaves };
}

const md = (text) => html(rendered(text).root);

function cases(table) {
  for (const [name, text, expected] of table) {
    test(name, () => assert.equal(md(text), expected));
  }
}

test("the module adds only window.duoMarkdown", () => {
  assert.deepEqual(Object.keys(window), ["duoMarkdown"]);
  assert.equal(typeof render, "function");
});

test("the DOM stand-in refuses HTML, so a test would catch a script using it", () => {
  const p = document.createElement("p");
  assert.throws(() => {
    p.innerHTML = "<b>x</b>";
  }, /HTML parser/);
  assert.throws(() => p.insertAdjacentHTML("beforeend", "<b>x</b>"), /HTML parser/);
});

describe("paragraphs", () => {
  cases([
    ["one line", "Hello, world.", "<p>Hello, world.</p>"],
    ["lines run on in one paragraph", "one\ntwo", "<p>one\ntwo</p>"],
    ["a blank line ends a paragraph", "one\n\ntwo", "<p>one</p><p>two</p>"],
    ["a line of spaces is blank", "one\n   \ntwo", "<p>one</p><p>two</p>"],
    ["nothing renders nothing", "", ""],
    ["blank lines render nothing", "\n\n \n", ""],
  ]);
});

describe("headings", () => {
  cases([
    // A message's headings sit below the page's own: # is h3.
    ["# is h3", "# One", "<h3>One</h3>"],
    ["## is h4", "## Two", "<h4>Two</h4>"],
    ["### is h5", "### Three", "<h5>Three</h5>"],
    ["#### and deeper are h6", "#### Four\n###### Six", "<h6>Four</h6><h6>Six</h6>"],
    ["seven hashes are text", "####### Seven", "<p>####### Seven</p>"],
    ["a hash needs a space after it", "#hashtag", "<p>#hashtag</p>"],
    ["up to three spaces before", "   # Indented", "<h3>Indented</h3>"],
    ["four spaces are text", "    # Code-like", "<p>    # Code-like</p>"],
    ["inline marks inside", "# A *b* `c`", "<h3>A <em>b</em> <code>c</code></h3>"],
    ["a heading ends a paragraph", "a\n# H\nb", "<p>a</p><h3>H</h3><p>b</p>"],
  ]);
});

describe("emphasis", () => {
  cases([
    ["bold", "**b** and __b__", "<p><strong>b</strong> and <strong>b</strong></p>"],
    ["italic", "*i* and _i_", "<p><em>i</em> and <em>i</em></p>"],
    [
      "italic inside bold",
      "**bold _and em_ too**",
      "<p><strong>bold <em>and em</em> too</strong></p>",
    ],
    ["underscores inside words", "snake_case_name", "<p>snake_case_name</p>"],
    ["stars inside words", "a*b*c", "<p>a*b*c</p>"],
    ["stars with spaces around", "2 * 3 * 4", "<p>2 * 3 * 4</p>"],
    ["unclosed marks stay text", "**open and *also", "<p>**open and *also</p>"],
    ["marks do not cross lines", "**one\ntwo**", "<p>**one\ntwo**</p>"],
  ]);
});

describe("code spans", () => {
  cases([
    ["a code span", "run `ls -la` now", "<p>run <code>ls -la</code> now</p>"],
    ["no marks inside code", "`**not bold**`", "<p><code>**not bold**</code></p>"],
    ["code inside bold", "**`x` bold**", "<p><strong><code>x</code> bold</strong></p>"],
    ["the first mark wins", "*a `b` c*", "<p><em>a <code>b</code> c</em></p>"],
    ["an unclosed backtick is text", "a ` b", "<p>a ` b</p>"],
  ]);
});

const bar = (lang) =>
  `<div class="code-bar"><span class="lang">${lang}</span><button class="copy"></button></div>`;
const block = (lang, code) => `<div class="code">${bar(lang)}<pre><code>${code}</code></pre></div>`;

describe("fenced code blocks", () => {
  cases([
    ["a block with its language", "```py\nx = 1\ny = 2\n```", block("py", "x = 1\ny = 2")],
    ["no language: code", "```\nx\n```", block("code", "x")],
    ["tildes fence too", "~~~sh\nls\n~~~", block("sh", "ls")],
    [
      "markdown inside stays text",
      "```\n# not a heading\n**not bold**\n- not a list\n> not a quote\n```",
      block("code", "# not a heading\n**not bold**\n- not a list\n&gt; not a quote"),
    ],
    [
      "indentation is kept",
      "```\n  indented\n\tand tabbed\n```",
      block("code", "  indented\n\tand tabbed"),
    ],
    ["the other fence does not close", "```\na\n~~~\nb\n```", block("code", "a\n~~~\nb")],
    [
      "text before and after",
      "before\n```\ncode\n```\nafter",
      `<p>before</p>${block("code", "code")}<p>after</p>`,
    ],
    [
      "a closing fence may be indented",
      "```\nx\n   ```\nafter",
      `${block("code", "x")}<p>after</p>`,
    ],
    // While a message streams in, its block has not closed yet.
    ["unclosed: code to the end", "```js\nlet x = 1;\n\nlet y", block("js", "let x = 1;\n\nlet y")],
    ["only the opening fence", "```", block("code", "")],
  ]);

  test("the copy button copies the code alone", () => {
    const { root } = rendered("Some code:\n```py\nx = 1\n  y = 2\n```\nDone.");
    const button = elements(root).find((e) => e.tagName === "BUTTON");
    assert.equal(button.getText(), "x = 1\n  y = 2");
  });
});

describe("lists", () => {
  cases([
    ["bullets", "- a\n- b", "<ul><li>a</li><li>b</li></ul>"],
    ["any bullet mark", "* a\n+ b", "<ul><li>a</li><li>b</li></ul>"],
    ["numbered", "1. one\n2. two", '<ol start="1"><li>one</li><li>two</li></ol>'],
    [
      "numbered from where it starts",
      "3) three\n4) four",
      '<ol start="3"><li>three</li><li>four</li></ol>',
    ],
    [
      "another kind starts another list",
      "- a\n1. b",
      '<ul><li>a</li></ul><ol start="1"><li>b</li></ol>',
    ],
    [
      "an indented line continues the item",
      "- item\n  continued\n- next",
      "<ul><li>item\n  continued</li><li>next</li></ul>",
    ],
    ["a blank line ends a list", "- a\n\n- b", "<ul><li>a</li></ul><ul><li>b</li></ul>"],
    ["a plain line ends a list", "- a\nplain", "<ul><li>a</li></ul><p>plain</p>"],
    ["a list ends a paragraph", "para\n- a", "<p>para</p><ul><li>a</li></ul>"],
    [
      "inline marks inside",
      "- **b** and `c`",
      "<ul><li><strong>b</strong> and <code>c</code></li></ul>",
    ],
    ["a mark needs a space after it", "-no\n1.no", "<p>-no\n1.no</p>"],
  ]);
});

describe("quotes and rules", () => {
  cases([
    ["a quote", "> quoted *text*", "<blockquote>quoted <em>text</em></blockquote>"],
    ["no space after >", ">tight", "<blockquote>tight</blockquote>"],
    ["rules", "---\n***\n___\n- - -", "<hr><hr><hr><hr>"],
    ["a rule between paragraphs", "a\n\n---\n\nb", "<p>a</p><hr><p>b</p>"],
    ["two dashes are text", "--", "<p>--</p>"],
  ]);
});

describe("links: to http(s) only, the rest stays text", () => {
  test("a link to an https address", () => {
    const { root } = rendered("see [the docs](https://example.com/a?b=1) now");
    assert.equal(
      html(root),
      '<p>see <a href="https://example.com/a?b=1" target="_blank" rel="noopener noreferrer nofollow">the docs</a> now</p>',
    );
  });
  const refused = [
    "![image](https://example.com/x.png)",
    "<https://example.com>",
    "[x](javascript:alert(1))",
    "[x](data:text/html,<b>hi</b>)",
    "[x](//example.com)",
    "https://example.com/a_b_c",
  ];
  for (const text of refused) {
    test(text, () => {
      const { root } = rendered(text);
      assert.equal(root.textContent, text);
      assert.deepEqual(elements(root).map((e) => e.tagName), ["P"]);
    });
  }
});

describe("pipe tables", () => {
  test("a header, a rule, rows; cells keep their inline marks", () => {
    const text = "| mode | tok/s |\n|---|---:|\n| **async** | 26.0 |\n| sync | 17.3 |\nafter";
    assert.equal(
      md(text),
      '<div class="table"><table><thead><tr><th>mode</th><th>tok/s</th></tr></thead>' +
        "<tbody><tr><td><strong>async</strong></td><td>26.0</td></tr>" +
        "<tr><td>sync</td><td>17.3</td></tr></tbody></table></div><p>after</p>",
    );
  });
  test("outer pipes optional, an escaped pipe is text", () => {
    assert.equal(
      md("a | b\n--- | ---\nx \\| y | z"),
      '<div class="table"><table><thead><tr><th>a</th><th>b</th></tr></thead>' +
        "<tbody><tr><td>x \\| y</td><td>z</td></tr></tbody></table></div>",
    );
  });
  test("a pipe without a rule under it is a paragraph", () => {
    assert.equal(md("a | b\nc | d"), "<p>a | b\nc | d</p>");
  });
});

describe("HTML in model text stays text", () => {
  const payloads = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    '<a href="javascript:alert(3)">x</a>',
    "<b>bold?</b>",
    "<!-- a comment -->",
    "&lt;already escaped&gt; &amp;",
  ];
  const contexts = [
    ["a paragraph", (p) => p],
    ["a heading", (p) => `# ${p}`],
    ["a list item", (p) => `- ${p}`],
    ["a quote", (p) => `> ${p}`],
    ["bold", (p) => `**${p}**`],
    ["a code span", (p) => `\`${p}\``],
    ["a code block", (p) => `\`\`\`html\n${p}\n\`\`\``],
  ];
  for (const [where, wrap] of contexts) {
    test(`in ${where}`, () => {
      for (const payload of payloads) {
        const { root } = rendered(wrap(payload));
        assert.ok(root.textContent.includes(payload), payload); // as typed, entities too
        for (const e of elements(root)) {
          assert.ok(TAGS.has(e.tagName), `${payload}: made a ${e.tagName}`);
          for (const attr of ["href", "src", "onerror", "onclick", "onload"]) {
            assert.equal(e[attr], undefined, `${payload}: set ${attr}`);
          }
        }
      }
    });
  }

  test("as the page shows it: escaped", () => {
    assert.equal(
      md("# <img src=x onerror=alert(1)>\n\n**<b>x</b>**"),
      "<h3>&lt;img src=x onerror=alert(1)&gt;</h3><p><strong>&lt;b&gt;x&lt;/b&gt;</strong></p>",
    );
  });
});

describe("the text shown is ranges of the source", () => {
  const text = [
    "# Title with **bold**",
    "",
    "A paragraph with `code` and *em*.",
    "- item one",
    "  continued",
    "1. first",
    "> quote",
    "---",
    "```py",
    "x = 1",
    "```",
    "tail",
  ].join("\n");

  test("in order, without overlaps, without the marks", () => {
    const { leaves } = rendered(text);
    let at = 0;
    for (const [start, end] of leaves) {
      assert.ok(at <= start && start <= end && end <= text.length, `${start}..${end}`);
      at = end;
    }
    const shown = leaves.map(([s, e]) => text.slice(s, e));
    assert.deepEqual(shown.slice(0, 2), ["Title with ", "bold"]);
    assert.ok(shown.includes("code") && shown.includes("em") && shown.includes("x = 1"));
    assert.ok(!shown.some((s) => s.includes("**") || s.includes("`") || s.startsWith("#")));
  });

  test("every prefix renders (a message streams in a token at a time)", () => {
    for (let n = 0; n <= text.length; n++) {
      const { root, leaves } = rendered(text.slice(0, n));
      for (const [, end] of leaves) assert.ok(end <= n);
      for (const e of elements(root)) assert.ok(TAGS.has(e.tagName), e.tagName);
    }
  });
});

describe("syntax colours, with prism.js loaded as the page loads it", () => {
  const withPrism = load("prism.js", "markdown.js");
  const colour = (text) => {
    const leaves = [];
    const leaf = (parent, start, end) => {
      leaves.push([start, end]);
      parent.appendChild(document.createTextNode(text.slice(start, end)));
    };
    return { out: html(withPrism.duoMarkdown.render(text, leaf, copyButton)), leaves };
  };

  test("a known language gets Prism's token classes, its text unchanged", () => {
    const text = '```python\ndef f(x):\n    return "a" + 1  # sum\n```';
    const { out, leaves } = colour(text);
    assert.match(out, /<span class="token keyword">def<\/span>/);
    assert.match(out, /<span class="token string">&quot;a&quot;<\/span>/);
    assert.match(out, /<span class="token number">1<\/span>/);
    assert.match(out, /<span class="token comment"># sum<\/span>/);
    // the leaves cover the body exactly once, in order
    const body = text.slice(text.indexOf("\n") + 1, text.lastIndexOf("\n"));
    assert.equal(leaves.map(([a, b]) => text.slice(a, b)).join(""), body);
  });

  test("model text in a highlighted block stays text", () => {
    const { out } = colour('```html\n<script>alert(1)</script><img src=x onerror="alert(2)">\n```');
    assert.ok(!out.includes("<script>") && !out.includes("<img"));
    assert.match(out, /&lt;/);
  });

  test("an unknown language, or none, stays plain", () => {
    assert.equal(colour("```klingon\nqapla'\n```").out, block("klingon", "qapla'"));
    assert.equal(colour("```\nx = 1\n```").out, block("code", "x = 1"));
  });
});
