// duo's web page: a streaming chat whose accepted draft tokens are coloured by where they
// came from, the figures of each response, and the drafters connected to the lead.
//
// Model text only ever reaches the page as text nodes (see markdown.js). The page talks to
// the lead's own API: /v1/chat/completions (SSE; each chunk's `duo` field names the
// source of its text), /v1/models (to check the key) and /v1/duo/events (the live feed).
"use strict";

(function () {
  const { $, load, save, fmt, setStatus, sseEvents } = window.duoUtil;
  const STORE = {
    chats: "duo.chats", current: "duo.current", settings: "duo.settings", key: "duo.key",
    theme: "duo.theme",
  };
  // Sampling settings: "" leaves a field to the lead's default.
  const DEFAULTS = {
    system: "", temperature: 0.8, max_tokens: 512, seed: "", top_p: "", top_k: "", min_p: "",
    repeat_penalty: "", presence_penalty: "", frequency_penalty: "", stop: "", probs: false,
  };
  const NUMBERS = { temperature: parseFloat, max_tokens: parseInt, seed: parseInt, top_p: parseFloat, top_k: parseInt,
    min_p: parseFloat, repeat_penalty: parseFloat, presence_penalty: parseFloat, frequency_penalty: parseFloat };
  const BUSY = "Stop the answer first (or let it finish)";
  const { MAIN, label } = window.duoSources;
  const sourceClasses = window.duoSources.classes;
  const WINDOW_MS = 500; // tok/s over the last half second, for the chart
  const MIN_SPAN_MS = 150; // a round's chunks arrive together: no rate over less than this

  const state = {
    chats: load(STORE.chats, []),
    current: load(STORE.current, null),
    settings: Object.assign({}, DEFAULTS, load(STORE.settings, {})),
    key: load(STORE.key, ""),
    running: null, // {controller, message}
    deleted: null, // {chat, index, timer}: the last chat deleted, for undo
  };

  function currentChat() {
    let chat = state.chats.find((c) => c.id === state.current);
    if (!chat) {
      chat = { id: window.duoChats.newId(), title: "New chat", messages: [] };
      state.chats.unshift(chat);
      state.current = chat.id;
    }
    return chat;
  }

  function persist() {
    save(STORE.chats, state.chats.slice(0, window.duoChats.MAX_CHATS));
    save(STORE.current, state.current);
  }

  // -- sources and colours -----------------------------------------------------------------

  function drawLegend(chat) {
    const legend = $("legend");
    legend.replaceChildren();
    const seen = new Set();
    for (const m of chat.messages) for (const s of m.segments || []) if (s.source) seen.add(s.source);
    if (seen.size === 0) return;
    const title = document.createElement("span");
    title.textContent = "accepted draft tokens from:";
    legend.appendChild(title);
    for (const source of seen) {
      const item = document.createElement("span");
      item.className = sourceClasses(source);
      item.dataset.source = source;
      item.textContent = label(source);
      legend.appendChild(item);
    }
    const plain = document.createElement("span");
    plain.className = "plain";
    plain.textContent = "plain: the main model's own";
    legend.appendChild(plain);
  }

  // -- copying -----------------------------------------------------------------------------

  function copyButton(getText, what) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy " + (what || "this code"));
    button.addEventListener("click", async () => {
      const text = getText();
      try {
        await navigator.clipboard.writeText(text);
      } catch (e) {
        const area = document.createElement("textarea");
        area.value = text;
        document.body.appendChild(area);
        area.select();
        document.execCommand("copy");
        area.remove();
      }
      button.textContent = "Copied";
      setTimeout(() => (button.textContent = "Copy"), 1200);
    });
    return button;
  }

  // -- rendering messages ---------------------------------------------------------------

  // A leaf function for markdown.js: text[start:end], split where its origin changes.
  function leafFor(text, segments) {
    const bounds = [];
    let at = 0;
    for (const s of segments) {
      bounds.push({ start: at, end: at + s.text.length, source: s.source, probs: s.probs });
      at += s.text.length;
    }
    return function leaf(parent, start, end) {
      let lo = 0;
      let hi = bounds.length - 1;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (bounds[mid].end <= start) lo = mid + 1;
        else hi = mid;
      }
      if (!bounds.length) return;
      for (let i = lo; i < bounds.length && start < end; i++) {
        const b = bounds[i];
        const stop = Math.min(end, b.end);
        if (stop <= start) continue;
        const piece = text.slice(start, stop);
        if (b.source || b.probs) {
          const span = document.createElement("span");
          if (b.source) {
            span.className = sourceClasses(b.source);
            span.dataset.source = b.source;
          }
          span.title = [b.source ? label(b.source) : "", b.probs || ""].filter(Boolean).join("\n");
          if (b.probs) span.classList.add("probs");
          span.textContent = piece;
          parent.appendChild(span);
        } else {
          parent.appendChild(document.createTextNode(piece));
        }
        start = stop;
      }
    };
  }

  // A chunk's tokens with their probabilities, for its hover text: each token, how likely
  // the main model found it, and its runners-up ("" without logprobs).
  function tokenProbs(logprobs) {
    const entries = logprobs && Array.isArray(logprobs.content) ? logprobs.content : [];
    const pct = (lp) => `${(100 * Math.exp(lp)).toFixed(lp > -0.01 ? 0 : 1)}%`;
    return entries
      .map((e) => {
        const others = (e.top_logprobs || []).filter((t) => t.token !== e.token).slice(0, 2);
        const also = others.length ? ` (also ${others.map((t) => `${JSON.stringify(t.token)} ${pct(t.logprob)}`).join(", ")})` : "";
        return `${JSON.stringify(e.token)} ${pct(e.logprob)}${also}`;
      })
      .join("\n");
  }

  function renderBody(body, message) {
    const segments = message.segments || [{ text: message.content, source: null }];
    const text = segments.map((s) => s.text).join("");
    body.replaceChildren(window.duoMarkdown.render(text, leafFor(text, segments), copyButton));
  }

  function action(text, name, title, run) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "action " + name;
    button.textContent = text;
    button.setAttribute("aria-label", title);
    button.addEventListener("click", () => {
      if (!state.running) run();
    });
    return button;
  }

  function messageNode(message, index, chat) {
    const node = document.createElement("article");
    node.className = "msg " + message.role;
    const body = document.createElement("div");
    body.className = "body";
    node.appendChild(body);
    if (message.role === "user") body.textContent = message.content;
    else renderBody(body, message);
    const tools = document.createElement("div");
    tools.className = "tools";
    const last = index === chat.messages.length - 1;
    if (message.role === "user") {
      tools.appendChild(action("Edit", "edit", "Edit this message and send it again", () => edit(chat, index)));
    } else if (last) {
      const again = message.error ? "Retry" : "Regenerate";
      tools.appendChild(action(again, "regenerate", again + " this answer", () => regenerate(chat)));
    }
    tools.appendChild(copyButton(() => message.content, message.role === "user" ? "this message" : "this answer"));
    node.appendChild(tools);
    if (message.error) showError(node, message.error);
    if (message.stats) showStats(node, message);
    return node;
  }

  function showError(node, text) {
    let box = node.querySelector(".error");
    if (!box) {
      box = document.createElement("p");
      box.className = "error";
      node.insertBefore(box, node.querySelector(".tools"));
    }
    box.textContent = text;
  }

  function drawChat() {
    const chat = currentChat();
    const list = $("messages");
    list.replaceChildren(...chat.messages.map((m, i) => messageNode(m, i, chat)));
    list.scrollTop = list.scrollHeight;
    drawLegend(chat);
    drawChatList();
    setRunning(Boolean(state.running)); // the buttons just made wait too, if an answer streams
  }

  function drawChatList() {
    const ul = $("chat-list");
    ul.replaceChildren();
    for (const chat of state.chats) {
      const li = document.createElement("li");
      const open = document.createElement("button");
      open.type = "button";
      open.className = "chat-title" + (chat.id === state.current ? " current" : "");
      open.textContent = chat.title;
      open.addEventListener("click", () => {
        if (state.running) return;
        state.current = chat.id;
        persist();
        drawChat();
      });
      const remove = document.createElement("button");
      remove.type = "button";
      remove.className = "remove";
      remove.title = "Delete this chat";
      remove.setAttribute("aria-label", `Delete the chat “${chat.title}”`);
      remove.textContent = "×";
      remove.addEventListener("click", () => deleteChat(chat));
      li.append(open, remove);
      ul.appendChild(li);
    }
  }

  function deleteChat(chat) {
    if (state.running) return;
    const index = state.chats.indexOf(chat);
    state.chats = state.chats.filter((c) => c !== chat);
    if (state.current === chat.id) state.current = state.chats.length ? state.chats[0].id : null;
    persist();
    drawChat();
    if (state.deleted) clearTimeout(state.deleted.timer);
    const timer = setTimeout(() => toast(null), 10000);
    state.deleted = { chat, index, timer };
    toast(`Deleted “${chat.title}”.`, "Undo", undoDelete);
  }

  function undoDelete() {
    const d = state.deleted;
    if (!d) return;
    clearTimeout(d.timer);
    state.deleted = null;
    state.chats.splice(Math.min(d.index, state.chats.length), 0, d.chat);
    state.current = d.chat.id;
    persist();
    drawChat();
    toast(null);
  }

  // A line at the bottom of the page with one action; null hides it.
  function toast(text, actionText, run) {
    const box = $("toast");
    box.replaceChildren();
    box.hidden = text === null;
    if (text === null) return;
    const span = document.createElement("span");
    span.textContent = text;
    box.appendChild(span);
    if (actionText) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = actionText;
      button.addEventListener("click", run);
      box.appendChild(button);
      button.focus();
    }
  }

  // -- import and export ------------------------------------------------------------------

  function exportChats() {
    const blob = new Blob([window.duoChats.exported(state.chats)], { type: "application/json" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = `duo-chats-${new Date().toISOString().slice(0, 10)}.json`;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }

  async function importChats(file) {
    try {
      const incoming = window.duoChats.parseExport(await file.text());
      state.chats = window.duoChats.merged(state.chats, incoming);
      if (incoming.length) state.current = state.chats[0].id;
      persist();
      drawChat();
      toast(`Imported ${incoming.length} chat${incoming.length === 1 ? "" : "s"} from ${file.name}.`);
    } catch (e) {
      toast(`Could not import ${file.name}: ${e.message}.`);
    }
  }

  // -- statistics of a response -----------------------------------------------------------

  function stat(parent, name, text, value) {
    const item = document.createElement("span");
    item.className = "stat";
    item.dataset.stat = name;
    item.dataset.value = String(value);
    item.textContent = text;
    parent.appendChild(item);
  }

  function showStats(node, message) {
    const s = message.stats;
    let box = node.querySelector(".stats");
    if (!box) {
      box = document.createElement("div");
      box.className = "stats";
      node.insertBefore(box, node.querySelector(".tools"));
    }
    box.replaceChildren();
    const figures = document.createElement("div");
    figures.className = "figures";
    const t = s.timings;
    const tps = t ? t.predicted_per_second : s.liveTps;
    stat(figures, "tps", `${fmt(tps, 1)} tok/s`, tps);
    stat(figures, "ttft", `TTFT ${fmt(s.ttftMs, 0)} ms`, s.ttftMs);
    if (t) {
      stat(figures, "acceptance", `acceptance ${fmt(100 * t.acceptance_rate, 0)}%`, t.acceptance_rate);
      stat(figures, "mal", `mean acceptance length ${fmt(t.mean_acceptance_length, 2)}`, t.mean_acceptance_length);
      stat(figures, "tokens", `${t.predicted_n} tokens`, t.predicted_n);
    } else {
      // While streaming, each round's own token counts a round: tokens per round so far.
      const own = s.bySource[MAIN] || 0;
      const mal = own ? s.tokens / own : NaN;
      stat(figures, "mal", `mean acceptance length ≈${fmt(mal, 2)}`, mal);
      stat(figures, "tokens", `${s.tokens} tokens`, s.tokens);
    }
    box.appendChild(figures);
    const shares = document.createElement("div");
    shares.className = "shares";
    const total = Object.values(s.bySource).reduce((a, b) => a + b, 0);
    const names = Object.keys(s.bySource).sort((a, b) => s.bySource[b] - s.bySource[a]);
    for (const source of names) {
      const n = s.bySource[source];
      const item = document.createElement("span");
      item.className = "share" + (source === MAIN ? "" : " " + sourceClasses(source));
      item.dataset.source = source;
      item.dataset.tokens = String(n);
      item.dataset.share = String(total ? n / total : 0);
      item.textContent = `${label(source)} ${fmt(total ? (100 * n) / total : 0, 0)}% (${n})`;
      shares.appendChild(item);
    }
    box.appendChild(shares);
    if (s.curve && s.curve.length > 1) box.appendChild(chart(s.curve));
    if (s.stopped) {
      const note = document.createElement("span");
      note.className = "muted";
      note.textContent = "stopped";
      box.appendChild(note);
    }
  }

  // tok/s over the response: [[ms since the first token, tok/s], ...] on a small canvas.
  function chart(curve) {
    const canvas = document.createElement("canvas");
    canvas.className = "chart";
    const w = 240;
    const h = 48;
    const ratio = window.devicePixelRatio || 1;
    canvas.width = w * ratio;
    canvas.height = h * ratio;
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    canvas.title = "tok/s over the response";
    canvas.setAttribute("role", "img");
    const ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    const tMax = Math.max(1, curve[curve.length - 1][0]);
    const vMax = Math.max(1, ...curve.map((p) => p[1]));
    ctx.strokeStyle = "#ccc";
    ctx.beginPath();
    ctx.moveTo(0, h - 0.5);
    ctx.lineTo(w, h - 0.5);
    ctx.stroke();
    ctx.strokeStyle = "#2a6fdb";
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    curve.forEach(([t, v], i) => {
      const x = (t / tMax) * (w - 2) + 1;
      const y = h - 2 - (v / vMax) * (h - 14);
      if (i === 0) ctx.moveTo(x, y);
      else ctx.lineTo(x, y);
    });
    ctx.stroke();
    ctx.fillStyle = "#666";
    ctx.font = "10px sans-serif";
    ctx.fillText(`${vMax.toFixed(0)} tok/s peak`, 4, 10);
    const end = curve[curve.length - 1][1];
    canvas.setAttribute("aria-label",
      `tok/s over the response: peak ${vMax.toFixed(0)}, ${end.toFixed(0)} at the end, over ${(tMax / 1000).toFixed(1)} s`);
    canvas.textContent = canvas.getAttribute("aria-label");
    return canvas;
  }

  function headers() {
    const h = { "Content-Type": "application/json" };
    if (state.key) h.Authorization = "Bearer " + state.key;
    return h;
  }

  async function errorText(response) {
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) return body.error.message;
    } catch (e) {
      /* not JSON */
    }
    return `HTTP ${response.status}`;
  }

  // -- the key ---------------------------------------------------------------------------------

  function askForKey(message) {
    $("key-message").textContent = message;
    $("key-box").hidden = false;
    $("key-input").focus();
  }

  async function checkKey() {
    let response;
    try {
      response = await fetch("/v1/models", { headers: headers() });
    } catch (e) {
      setStatus("lead unreachable", "bad");
      return false;
    }
    if (response.status === 401) {
      const why = await errorText(response);
      askForKey(
        state.key
          ? `The lead refused this API key (${why}). Enter the key the lead was started with (duo lead --api-key).`
          : "This lead needs an API key (it was started with --api-key). Enter it to chat."
      );
      return false;
    }
    $("key-box").hidden = true;
    if (response.ok) {
      const body = await response.json();
      $("model").textContent = body.data && body.data[0] ? body.data[0].id : "";
    }
    return true;
  }

  // -- chatting ----------------------------------------------------------------------------------

  function request(chat) {
    const s = state.settings;
    const messages = [];
    if (s.system.trim()) messages.push({ role: "system", content: s.system });
    const turns = chat.messages;
    turns.forEach((m, i) => {
      const failed = (x) => x && x.role === "assistant" && x.error && !x.content;
      // an exchange that produced nothing is left out, so that roles keep alternating
      if (failed(m) || (m.role === "user" && failed(turns[i + 1]))) return;
      messages.push({ role: m.role, content: m.content });
    });
    const body = { model: "duo", messages, stream: true };
    for (const [name, parse] of Object.entries(NUMBERS)) {
      const value = parse(String(s[name]).trim());
      if (Number.isFinite(value) && !(name === "max_tokens" && value <= 0)) body[name] = value;
    }
    if (s.probs) {
      body.logprobs = true;
      body.top_logprobs = 3;
    }
    const stops = String(s.stop || "").split("\n").filter((x) => x.length);
    if (stops.length) body.stop = stops.slice(0, 4);
    return body;
  }

  async function send(text) {
    if (state.running || !text.trim()) return;
    const chat = currentChat();
    if (chat.messages.length === 0) chat.title = text.trim().slice(0, 40);
    chat.messages.push({ role: "user", content: text });
    await answer(chat);
  }

  // The last answer again (after an error, a retry), from the same conversation.
  async function regenerate(chat) {
    if (state.running) return;
    const last = chat.messages[chat.messages.length - 1];
    if (last && last.role === "assistant") chat.messages.pop();
    await answer(chat);
  }

  // A user message back in the composer; it and everything after it leave the chat.
  function edit(chat, index) {
    if (state.running) return;
    $("prompt").value = chat.messages[index].content;
    chat.messages.splice(index);
    persist();
    drawChat();
    $("prompt").focus();
  }

  async function answer(chat) {
    const body = request(chat);
    const message = { role: "assistant", content: "", segments: [], stats: null };
    chat.messages.push(message);
    persist();
    drawChat();
    const node = $("messages").lastChild;
    node.classList.add("streaming");
    const controller = new AbortController();
    state.running = { controller, message };
    setRunning(true);
    const started = performance.now();
    const live = { tokens: 0, ttftMs: NaN, bySource: {}, curve: [], liveTps: NaN, timings: null, stopped: false };
    const arrivals = []; // [ms, tokens so far]
    let pending = false;
    const redraw = () => {
      pending = false;
      renderBody(node.querySelector(".body"), message);
      drawLegend(chat);
      message.stats = live;
      showStats(node, message);
      const list = $("messages");
      list.scrollTop = list.scrollHeight;
    };
    const schedule = () => {
      if (!pending) {
        pending = true;
        requestAnimationFrame(redraw);
      }
    };
    try {
      const response = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: headers(),
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!response.ok) {
        const why = await errorText(response);
        if (response.status === 401) {
          message.error = `The lead refused the API key: ${why}.`;
          askForKey(`The lead refused the API key (${why}). Enter the right key and send again.`);
        } else {
          message.error = `The lead answered ${response.status}: ${why}`;
        }
        return;
      }
      for await (const ev of sseEvents(response)) {
        if (ev.data === "[DONE]") break;
        const chunk = JSON.parse(ev.data);
        if (chunk.error) {
          message.error = `Generation failed: ${chunk.error.message}`;
          break;
        }
        const choice = chunk.choices && chunk.choices[0];
        const content = choice && choice.delta ? choice.delta.content : null;
        if (content) {
          const now = performance.now() - started;
          if (!Number.isFinite(live.ttftMs)) live.ttftMs = now;
          const origin = chunk.duo || { source: null, tokens: 0 };
          const source = origin.source || MAIN;
          const tokens = origin.tokens || 0;
          live.tokens += tokens;
          live.bySource[source] = (live.bySource[source] || 0) + tokens;
          message.content += content;
          const last = message.segments[message.segments.length - 1];
          const kept = source === MAIN ? null : source;
          const probs = tokenProbs(choice.logprobs);
          if (probs) message.segments.push({ text: content, source: kept, probs });
          else if (last && last.source === kept && !last.probs) last.text += content;
          else message.segments.push({ text: content, source: kept });
          arrivals.push([now, live.tokens]);
          while (arrivals.length > 2 && now - arrivals[1][0] >= WINDOW_MS) arrivals.shift();
          const span = now - arrivals[0][0];
          if (span >= MIN_SPAN_MS) {
            live.liveTps = ((live.tokens - arrivals[0][1]) * 1000) / span;
            if (live.curve.length < 400) live.curve.push([now - live.ttftMs, live.liveTps]);
          }
          schedule();
        }
        if (chunk.timings) live.timings = chunk.timings;
      }
    } catch (e) {
      if (e.name === "AbortError") live.stopped = true;
      else message.error = `The connection to the lead failed: ${e.message}`;
    } finally {
      state.running = null;
      setRunning(false);
      node.classList.remove("streaming");
      message.stats = live.tokens || live.timings ? live : null;
      if (!message.content && !message.error && live.stopped) message.error = "Stopped before any text.";
      persist();
      drawChat();
    }
  }

  function stop() {
    if (state.running) state.running.controller.abort();
  }

  // While an answer streams, what would change the chat under it waits: the buttons say why.
  function setRunning(running) {
    $("send").disabled = running;
    $("stop").disabled = !running;
    document.body.classList.toggle("running", running);
    for (const el of document.querySelectorAll("#new-chat, #import-chats, .action, .chat-title, .remove")) {
      el.disabled = running;
      if (running) el.title = BUSY;
      else if (el.title === BUSY) el.removeAttribute("title");
    }
    $("busy-note").hidden = !running;
  }

  // -- wiring ----------------------------------------------------------------------------------

  function bindSettings() {
    const probs = $("set-probs");
    probs.checked = Boolean(state.settings.probs);
    probs.addEventListener("change", () => {
      state.settings.probs = probs.checked;
      save(STORE.settings, state.settings);
    });
    for (const name of Object.keys(DEFAULTS).filter((n) => n !== "probs")) {
      const input = $("set-" + name.replace(/_/g, "-"));
      input.value = state.settings[name];
      input.addEventListener("input", () => {
        state.settings[name] = input.value;
        save(STORE.settings, state.settings);
      });
    }
  }

  // A toggle button that shows and hides a panel, saying which it is (aria-expanded).
  function toggle(button, shown, show) {
    button.setAttribute("aria-expanded", String(shown()));
    button.addEventListener("click", () => {
      show(!shown());
      button.setAttribute("aria-expanded", String(shown()));
    });
  }

  const THEMES = ["auto", "light", "dark"];

  function setTheme(theme) {
    if (theme === "auto") delete document.documentElement.dataset.theme;
    else document.documentElement.dataset.theme = theme;
    $("theme").textContent = "Theme: " + theme;
    save(STORE.theme, theme);
  }

  function start() {
    bindSettings();
    const settings = $("settings");
    toggle($("show-settings"), () => !settings.hidden, (on) => (settings.hidden = !on));
    for (const [button, panel] of [[$("show-chats"), $("chats")], [$("show-drafters"), $("drafters")]]) {
      toggle(button, () => panel.classList.contains("open"), (on) => panel.classList.toggle("open", on));
    }
    setTheme(THEMES.includes(load(STORE.theme, "auto")) ? load(STORE.theme, "auto") : "auto");
    $("theme").addEventListener("click", () => {
      const now = THEMES.indexOf(load(STORE.theme, "auto"));
      setTheme(THEMES[(now + 1) % THEMES.length]);
    });
    $("export-chats").addEventListener("click", exportChats);
    $("import-chats").addEventListener("click", () => $("import-file").click());
    $("import-file").addEventListener("change", () => {
      const file = $("import-file").files[0];
      if (file) importChats(file);
      $("import-file").value = "";
    });
    window.duoPanel.restoreLast();
    $("new-chat").addEventListener("click", () => {
      if (state.running) return;
      state.current = null;
      currentChat();
      persist();
      drawChat();
      $("prompt").focus();
    });
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      const text = $("prompt").value;
      if (!text.trim() || state.running) return;
      $("prompt").value = "";
      send(text);
    });
    $("prompt").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        $("composer").requestSubmit();
      }
    });
    $("stop").addEventListener("click", stop);
    $("key-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      state.key = $("key-input").value.trim();
      save(STORE.key, state.key);
      $("key-input").value = "";
      await checkKey();
    });
    $("forget-key").addEventListener("click", () => {
      state.key = "";
      save(STORE.key, "");
      checkKey();
    });
    drawChat();
    checkKey();
    window.duoPanel.follow(headers);
  }

  start();
})();
