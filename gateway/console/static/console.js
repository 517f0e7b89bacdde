// The console's only script. A part of a page marked `data-live="<url>"` is fetched again from that
// URL every few seconds while it holds something running (`data-running`), and swapped in; forms
// with `data-confirm` ask before they are sent. The pages work without it, only less live.
"use strict";

const REFRESH_MS = 1500;

function watch(part) {
  if (part.querySelector("[data-running]")) {
    window.setTimeout(() => refresh(part), REFRESH_MS);
  }
}

async function refresh(part) {
  let reply;
  try {
    reply = await fetch(part.dataset.live, { credentials: "same-origin", headers: { accept: "text/html" } });
  } catch (error) {
    window.setTimeout(() => refresh(part), REFRESH_MS * 4); // the gateway away for a moment
    return;
  }
  if (reply.redirected) { // the session ended: the sign-in page
    window.location.assign(reply.url);
    return;
  }
  if (!reply.ok) {
    window.setTimeout(() => refresh(part), REFRESH_MS * 4);
    return;
  }
  const template = document.createElement("template");
  template.innerHTML = (await reply.text()).trim();
  const fresh = template.content.firstElementChild;
  if (!fresh) return;
  part.replaceWith(fresh);
  watch(fresh);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-live]").forEach(watch);
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
});
