// A minimal DOM for running the web page's scripts under Node, and the loader that runs
// them as the browser does: the unmodified file, in a context whose globals are `window`
// and `document`.
//
// Only what the scripts call exists: a call to anything else is a TypeError, and setting
// innerHTML (or outerHTML, or insertAdjacentHTML) throws, so a test fails if a script
// ever hands text to an HTML parser.

import { readFileSync } from "node:fs";
import vm from "node:vm";

export const STATIC = new URL("../../src/duo/lead/web/static/", import.meta.url);

class Node {
  constructor() {
    this.childNodes = [];
    this.parentNode = null;
  }

  appendChild(node) {
    if (node instanceof Fragment) {
      for (const child of node.childNodes) this.appendChild(child);
      node.childNodes = [];
      return node;
    }
    if (node.parentNode) node.parentNode.removeChild(node);
    node.parentNode = this;
    this.childNodes.push(node);
    return node;
  }

  append(...nodes) {
    for (const node of nodes) {
      this.appendChild(typeof node === "string" ? new Text(node) : node);
    }
  }

  removeChild(node) {
    this.childNodes = this.childNodes.filter((child) => child !== node);
    node.parentNode = null;
    return node;
  }

  get firstChild() {
    return this.childNodes[0] ?? null;
  }

  get lastChild() {
    return this.childNodes[this.childNodes.length - 1] ?? null;
  }

  get textContent() {
    return this.childNodes.map((child) => child.textContent).join("");
  }

  set textContent(value) {
    for (const child of this.childNodes) child.parentNode = null;
    this.childNodes = [];
    if (value !== "") this.appendChild(new Text(String(value)));
  }
}

class Text extends Node {
  constructor(data) {
    super();
    this.data = data;
  }

  get textContent() {
    return this.data;
  }

  appendChild() {
    throw new TypeError("a text node has no children");
  }
}

class Fragment extends Node {}

function parsesHtml() {
  throw new Error("model text must never reach an HTML parser");
}

class Element extends Node {
  constructor(tag) {
    super();
    this.tagName = tag.toUpperCase();
    this.className = "";
  }

  get innerHTML() {
    return parsesHtml();
  }

  set innerHTML(_html) {
    parsesHtml();
  }

  get outerHTML() {
    return parsesHtml();
  }

  set outerHTML(_html) {
    parsesHtml();
  }

  insertAdjacentHTML() {
    parsesHtml();
  }

  // Attributes are plain strings (no HTML parsing): the page sets a link's href so.
  setAttribute(name, value) {
    this.attributes = Object.assign(this.attributes || {}, { [name]: String(value) });
  }

  getAttribute(name) {
    return this.attributes && name in this.attributes ? this.attributes[name] : null;
  }
}

export const document = {
  createElement: (tag) => new Element(tag),
  createTextNode: (data) => new Text(String(data)),
  createDocumentFragment: () => new Fragment(),
};

// Run a script of the page (a file in STATIC) and return its `window`.
// The page's scripts, run in order in one context (a `window` of their own); Prism is
// told not to highlight the document by itself, as the page's data-manual tells it.
export function load(...names) {
  const window = names.includes("prism.js") ? { Prism: { manual: true } } : {};
  const context = vm.createContext({ window, document });
  for (const name of names) {
    const url = new URL(name, STATIC);
    vm.runInContext(readFileSync(url, "utf8"), context, { filename: url.pathname });
  }
  return window;
}

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" };

function escape(text) {
  return text.replace(/[&<>"]/g, (c) => ESCAPES[c]);
}

const VOID = new Set(["HR", "BR"]);

// A node as HTML, text escaped: what a browser would show for it. Attributes: class, and
// an ordered list's start.
export function html(node) {
  if (node instanceof Text) return escape(node.data);
  const inner = node.childNodes.map(html).join("");
  if (node instanceof Fragment) return inner;
  const tag = node.tagName.toLowerCase();
  let attrs = node.className ? ` class="${escape(node.className)}"` : "";
  if (node.start !== undefined) attrs += ` start="${node.start}"`;
  for (const [name, value] of Object.entries(node.attributes || {})) attrs += ` ${name}="${escape(value)}"`;
  return VOID.has(node.tagName) ? `<${tag}${attrs}>` : `<${tag}${attrs}>${inner}</${tag}>`;
}

// Every element under `node` (not the node itself), in document order.
export function elements(node) {
  const out = [];
  for (const child of node.childNodes) {
    if (child instanceof Element) out.push(child, ...elements(child));
  }
  return out;
}
