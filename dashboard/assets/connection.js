/* The dashboard's connection state, shown in the page rather than only in the console.
 *
 * Every page's data comes through Dash's callback requests (the router's, the live refreshes'). Dash, with
 * debug off, only logs a failed one to the console, so a server that went down or a callback that failed
 * left the page as it was, looking current. Here each such request is watched:
 * - it fails to reach the server: a red bar says so, since when, and how old the data on the page is; the
 *   interval keeps asking, and the first answer clears the bar;
 * - the server answers with an error (HTTP 4xx/5xx): the bar shows the answer's {"detail"};
 * - a request still waits after LOADING_AFTER_MS: a grey "Loading…" bar (a page being built, a slow server).
 * The bar is outside Dash's React tree (appended to <body>), so no re-render touches it.
 *
 * Loaded before plotly_early.js (assets load in name order), which wraps window.fetch in turn.
 */
(function () {
    "use strict";
    var LOADING_AFTER_MS = 400;
    var WATCHED = /_dash-(update-component|layout|dependencies)/;
    var fetch0 = window.fetch;
    if (!fetch0) {
        return;
    }
    var inflight = 0;
    var loadingTimer = null;
    var failingSince = null;
    var lastOk = null;
    var bar = null;

    function clock(t) {
        return new Date(t).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit", second: "2-digit"});
    }

    function element() {
        if (!bar) {
            bar = document.createElement("div");
            bar.id = "px-conn";
            bar.setAttribute("role", "status");
            bar.setAttribute("aria-live", "polite");
            bar.hidden = true;
            bar.dataset.state = "ok";
            (document.body || document.documentElement).appendChild(bar);
        }
        return bar;
    }

    function show(state, text) {
        var b = element();
        b.className = "px-conn px-conn-" + state;
        b.dataset.state = state;
        b.textContent = text;
        b.hidden = false;
    }

    function clear() {
        var b = element();
        b.hidden = true;
        b.dataset.state = "ok";
        b.className = "px-conn";
        b.textContent = "";
    }

    function dataAge() {
        return lastOk === null ? "" : " The page shows data as of " + clock(lastOk) + ".";
    }

    function failed(text) {
        if (failingSince === null) {
            failingSince = Date.now();
        }
        show("error", text + " (since " + clock(failingSince) + ")." + dataAge() + " Retrying at each refresh.");
    }

    function settled() {
        inflight = Math.max(0, inflight - 1);
        if (inflight === 0 && loadingTimer !== null) {
            clearTimeout(loadingTimer);
            loadingTimer = null;
        }
        if (inflight === 0 && element().dataset.state === "loading") {
            clear();
        }
    }

    window.fetch = function (input) {
        var url = typeof input === "string" ? input : (input && input.url) || "";
        if (!WATCHED.test(url)) {
            return fetch0.apply(this, arguments);
        }
        inflight += 1;
        if (loadingTimer === null) {
            loadingTimer = setTimeout(function () {
                loadingTimer = null;
                if (inflight > 0 && failingSince === null) {
                    show("loading", "Loading…");
                }
            }, LOADING_AFTER_MS);
        }
        return fetch0.apply(this, arguments).then(function (response) {
            settled();
            if (response.ok) {  // 200, and 204 (nothing to update)
                failingSince = null;
                lastOk = Date.now();
                if (element().dataset.state !== "loading" || inflight === 0) {
                    clear();
                }
                return response;
            }
            var status = "The server answered HTTP " + response.status;
            response.clone().json().then(function (body) {
                failed(status + (body && body.detail ? ": " + body.detail : ""));
            }, function () {
                failed(status);
            });
            return response;
        }, function (error) {
            settled();
            failed("No connection to the server");
            throw error;
        });
    };
})();
