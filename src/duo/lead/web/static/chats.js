// The page's chats: kept in localStorage, exported and imported as JSON.
//
// An export is {"duo_chats": 1, "chats": [...]}: each chat {id, title, messages}, each
// message {role: "user"|"assistant", content, ...}. An import is checked before anything
// is kept: a file that is not such an export is refused with a reason, and the chats it
// brings are added (a chat whose id is already here gets a new one).
"use strict";

(function (root) {
  const FORMAT = 1;
  const MAX_CHATS = 50;

  function newId() {
    return String(Date.now()) + Math.random().toString(16).slice(2, 6);
  }

  function exported(chats) {
    return JSON.stringify({ duo_chats: FORMAT, exported: new Date().toISOString(), chats }, null, 1);
  }

  // The chats of an export's text, or throws an Error whose message says what is wrong.
  function parseExport(text) {
    let data;
    try {
      data = JSON.parse(text);
    } catch (e) {
      throw new Error("not JSON");
    }
    if (!data || data.duo_chats !== FORMAT || !Array.isArray(data.chats)) {
      throw new Error("not an export of duo's chats (no duo_chats: 1 and chats list)");
    }
    return data.chats.map((chat, i) => {
      if (!chat || typeof chat.title !== "string" || !Array.isArray(chat.messages)) {
        throw new Error(`chat ${i + 1} has no title or messages`);
      }
      const messages = chat.messages.map((m, j) => {
        if (!m || (m.role !== "user" && m.role !== "assistant") || typeof m.content !== "string") {
          throw new Error(`chat ${i + 1}, message ${j + 1}: needs a role (user or assistant) and content`);
        }
        const kept = { role: m.role, content: m.content };
        if (Array.isArray(m.segments) && m.segments.every((s) => s && typeof s.text === "string")) {
          kept.segments = m.segments.map((s) => {
            const segment = { text: s.text, source: typeof s.source === "string" ? s.source : null };
            if (typeof s.probs === "string") segment.probs = s.probs;
            return segment;
          });
        }
        if (typeof m.error === "string") kept.error = m.error;
        return kept;
      });
      return { id: typeof chat.id === "string" ? chat.id : newId(), title: chat.title.slice(0, 200), messages };
    });
  }

  // `incoming` added in front of `chats`, ids kept unique, at most MAX_CHATS in all.
  function merged(chats, incoming) {
    const ids = new Set(chats.map((c) => c.id));
    const added = incoming.map((c) => (ids.has(c.id) ? Object.assign({}, c, { id: newId() }) : c));
    return added.concat(chats).slice(0, MAX_CHATS);
  }

  const api = { FORMAT, MAX_CHATS, newId, exported, parseExport, merged };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  else root.duoChats = api;
})(typeof window !== "undefined" ? window : globalThis);
