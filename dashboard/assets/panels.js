/* The run page's eight panels read as one: they zoom together and hover together.
 *
 * - syncZoom (a clientside callback on the panels' relayoutData, see dashboard/app.py): a zoom, pan or reset of
 *   one panel's steps is applied to the seven others, and written to the address bar (from=, to=) so that the
 *   view can be shared; it returns the range for the run page's view controls (ids.RUN_XRANGE).
 * - hover: the pointer over a step of one panel shows that step's values in every panel (Plotly.Fx.hover).
 */
(function () {
    "use strict";
    var PANELS = '[id^="panel-"] .js-plotly-plot';

    function panels() {
        return Array.prototype.slice.call(document.querySelectorAll(PANELS));
    }

    function close(a, b) {
        return Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(a), Math.abs(b));
    }

    // The x range a relayout event sets: [lo, hi], "auto" (reset), or null (it did not touch the x axis).
    function xRange(event) {
        if (!event) {
            return null;
        }
        if (event["xaxis.autorange"] === true) {
            return "auto";
        }
        if (event["xaxis.range[0]"] !== undefined && event["xaxis.range[1]"] !== undefined) {
            return [Number(event["xaxis.range[0]"]), Number(event["xaxis.range[1]"])];
        }
        if (Array.isArray(event["xaxis.range"])) {
            return [Number(event["xaxis.range"][0]), Number(event["xaxis.range"][1])];
        }
        return null;
    }

    function writeUrl(range) {
        var url = new URL(window.location.href);
        if (range === "auto") {
            url.searchParams.delete("from");
            url.searchParams.delete("to");
        } else {
            url.searchParams.set("from", String(Math.floor(range[0])));
            url.searchParams.set("to", String(Math.ceil(range[1])));
        }
        if (url.href !== window.location.href) {
            window.history.replaceState(window.history.state, "", url.href);
        }
    }

    function syncZoom() {
        var nc = window.dash_clientside.no_update;
        var ctx = window.dash_clientside.callback_context;
        var trigger = ctx && ctx.triggered && ctx.triggered[0];
        if (!trigger || !trigger.prop_id) {
            return nc;
        }
        var source = trigger.prop_id.split(".")[0];
        var range = xRange(trigger.value);
        if (range === null) {
            return nc;
        }
        panels().forEach(function (gd) {
            var owner = gd.closest('[id^="panel-"]');
            if (!owner || owner.id === source || !gd._fullLayout || !gd._fullLayout.xaxis) {
                return;
            }
            var axis = gd._fullLayout.xaxis;
            if (range === "auto") {
                if (!axis.autorange) {
                    window.Plotly.relayout(gd, {"xaxis.autorange": true});
                }
            } else if (axis.autorange || !close(axis.range[0], range[0]) || !close(axis.range[1], range[1])) {
                window.Plotly.relayout(gd, {"xaxis.range": range.slice()});
            }
        });
        writeUrl(range);
        return range === "auto" ? {auto: true} : {range: range};
    }

    window.dash_clientside = Object.assign({}, window.dash_clientside, {
        parallax: Object.assign({}, (window.dash_clientside || {}).parallax, {syncZoom: syncZoom})
    });

    // Hover: bound to each panel once it is drawn (panels come and go with the page).
    function fromPointer(data) {
        return data && data.event && typeof data.event.clientX === "number" && data.event.isTrusted !== false;
    }

    function bind(gd) {
        if (gd.__pxHover || typeof gd.on !== "function") {
            return;
        }
        gd.__pxHover = true;
        gd.on("plotly_hover", function (data) {
            if (!fromPointer(data) || !data.points || !data.points.length || !window.Plotly || !window.Plotly.Fx) {
                return;
            }
            var x = data.points[0].x;
            panels().forEach(function (other) {
                if (other !== gd && other._fullLayout) {
                    try {
                        window.Plotly.Fx.hover(other, {xval: x}, "xy");
                    } catch (e) { /* a panel being redrawn */ }
                }
            });
        });
        gd.on("plotly_unhover", function (data) {
            if (!fromPointer(data) || !window.Plotly || !window.Plotly.Fx) {
                return;
            }
            panels().forEach(function (other) {
                if (other !== gd && other._fullLayout) {
                    window.Plotly.Fx.unhover(other);
                }
            });
        });
    }

    // An alert's link (?alert=<id>) picks its card out in the diagnosis: scrolled into the sidebar's view once.
    var focused = null;

    setInterval(function () {
        panels().forEach(bind);
        var card = document.querySelector(".alert-card.alert-focus");
        if (card && card !== focused) {
            focused = card;
            card.scrollIntoView({block: "nearest"});
        }
    }, 500);
})();
