/* Which plotly.js bundle the dashboard's graphs get, and when it loads.
 *
 * Evaluating plotly.js is most of a run page's first render in headless Chromium, and it does not depend
 * on the data: the full bundle (plotly.min.js, 4.8 MB, every trace type) takes 1.4-3 s to evaluate on
 * the bench machine, the basic one (vendor/plotly-basic.min.js, 1.2 MB: scatter, bar, pie) 0.4-0.6 s,
 * while drawing the 8 panels takes ~0.5 s. And dcc.Graph asks for plotly.js only once its first graph
 * has mounted, that is after the router callback has answered with the page, so the download and the
 * evaluation queued behind the server's work.
 *
 * So here:
 * - Every page gets the basic bundle: their graphs are SVG scatter traces (see figures.GL_THRESHOLD; the
 *   compare page's overlays too, at pages.COMPARE_POINTS per run and metric: 16,000 points at most in a
 *   panel draw faster as SVG lines than in eight software WebGL contexts, and the full bundle's 4.8 MB
 *   took the compare page's first render past 2.5 s on the bench machine).
 * - On a run or compare page, the bundle is added as soon as the page's first callback request (the
 *   router's) has gone out, so it downloads and evaluates while the server builds the page, and it is
 *   preloaded before that. Not evaluated sooner: that blocks the page for as long, and before the
 *   request is out it would hold the request back.
 * - Until the bundle has run, window.Plotly is a promise of it: dcc.Graph's loader waits on window.Plotly
 *   when it is set, rather than adding Dash's plotly.min.js. On other pages (runs list, alerts) nothing
 *   loads until a graph (of a run page reached by a link) waits on it. The bundle, when it runs, sets
 *   window.Plotly to itself.
 */
(function () {
    "use strict";
    if (window.Plotly) {
        return;
    }
    var config;
    try {
        config = JSON.parse(document.getElementById("_dash-config").textContent);
    } catch (e) {
        return;
    }
    var path = window.location.pathname;
    var early = /\/compare\/?$/.test(path) || /\/runs\/\d+\/?$/.test(path);
    var prefix = config.requests_pathname_prefix || "/";
    var url = prefix + "assets/vendor/plotly-basic.min.js";

    var settle;
    var loaded = new Promise(function (resolve, reject) { settle = {resolve: resolve, reject: reject}; });
    loaded.catch(function () {});  // a graph waiting on it reports the failure
    var started = false;
    var fetch = window.fetch;

    function start() {
        if (started) {
            return;
        }
        started = true;
        if (window.fetch === watch) {
            window.fetch = fetch;
        }
        var script = document.createElement("script");
        script.src = url;
        script.async = true;
        script.onload = function () {
            if (window.Plotly === placeholder) {
                delete window.Plotly;
                settle.reject(new Error("plotly.js from " + url + " did not define window.Plotly"));
            } else {
                settle.resolve(window.Plotly);
            }
        };
        script.onerror = function () {
            delete window.Plotly;  // a graph mounted later loads Dash's plotly.min.js itself
            settle.reject(new Error("plotly.js did not load from " + url));
        };
        document.head.appendChild(script);
    }

    // A thenable: dcc.Graph's loader does Promise.resolve(window.Plotly), which calls then().
    var placeholder = {
        then: function (onResolved, onRejected) {
            start();
            return loaded.then(onResolved, onRejected);
        }
    };
    window.Plotly = placeholder;

    function watch(input) {
        var target = typeof input === "string" ? input : (input && input.url) || "";
        var out = fetch.apply(this, arguments);
        if (target.indexOf("_dash-update-component") !== -1) {
            start();
        }
        return out;
    }

    if (early) {
        var preload = document.createElement("link");
        preload.rel = "preload";
        preload.as = "script";
        preload.href = url;
        document.head.appendChild(preload);
        window.fetch = watch;  // (were there no callback request, the first graph waiting on Plotly starts it)
    }
})();
