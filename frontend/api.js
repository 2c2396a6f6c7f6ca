// The app's requests to the gradstep server: run code into a trace, list and read the examples.
// No DOM: a failed request is an Error whose message is meant for a person.
// A trace is returned as rows (columns.js): the page's own readers of it (the status line, the
// side-by-side view and its alignment) read version 4's columns as version 3's rows.

import { rowsOf } from "./columns.js";

export function createApi(base = "") {
  return {
    /** POST /api/trace → the trace (as rows); a refused run throws with the server's reason (and when to retry). */
    async trace(code, { signal } = {}) {
      const res = await fetch(`${base}/api/trace`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ code }),
        signal,
      });
      if (!res.ok) {
        let message = `${res.status} ${res.statusText}`;
        try {
          message = (await res.json()).error || message;
        } catch {}
        const retry = res.headers.get("retry-after");
        throw new Error(`${message}${retry ? ` (retry in ${retry} s)` : ""}`);
      }
      return rowsOf(await res.json());
    },
    /** The examples (name, title, summary, …) without their code. */
    async snippets() {
      return (await fetch(`${base}/api/snippets`)).json();
    },
    /** One example with its code. */
    async snippet(name) {
      return (await fetch(`${base}/api/snippets/${encodeURIComponent(name)}`)).json();
    },
  };
}
