// Helpers the page's scripts share: the element by id, localStorage that forgives, numbers
// for people, the status pill, and server-sent events read over fetch.
"use strict";

(function (root) {
  const $ = (id) => document.getElementById(id);

  // -- storage -------------------------------------------------------------------------

  function load(name, fallback) {
    try {
      const raw = localStorage.getItem(name);
      return raw === null ? fallback : JSON.parse(raw);
    } catch (e) {
      return fallback;
    }
  }

  function save(name, value) {
    try {
      localStorage.setItem(name, JSON.stringify(value));
    } catch (e) {
      /* full or disabled: the page still works, it just forgets */
    }
  }

  function fmt(value, digits) {
    return Number.isFinite(value) ? value.toFixed(digits) : "–";
  }

  function setStatus(text, kind) {
    const el = $("status");
    el.textContent = text;
    el.className = "pill " + (kind || "");
  }

  // -- reading server-sent events over fetch (so that the key can go in a header) ----------

  async function* sseEvents(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let kind = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) kind = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length) yield { kind, data: data.join("\n") };
      }
    }
  }

  root.duoUtil = { $, load, save, fmt, setStatus, sseEvents };
})(window);
