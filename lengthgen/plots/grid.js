// The static playground's control script (lengthgen.plots.render.GridHTML puts it after a grid figure).
//
// Plotly sliders and buttons cannot combine their states by themselves: each step or button can only set
// what it was given. So the controls of a grid figure carry method "skip" (plotly does nothing itself),
// and this script, run once after the figure is drawn, listens to every control and shows the traces of
// the grid point the controls select together. It reads layout.meta.grid:
//   owners[i]: the grid point of trace i, one index per dimension (-1: shown for every value of it);
//   controls[d]: ["slider", j] or ["menu", j], the control of dimension d;
//   labels[d]: the values of dimension d as text; title: the title, "{d}" standing for labels[d][active].
// plotly.io.to_html replaces {plot_id} with the figure's div id. grid_visibility (Python) computes what
// redraw() does, for the tests.
(function () {
    var gd = document.getElementById('{plot_id}');
    var grid = gd.layout.meta.grid;
    function active() {
        return grid.controls.map(function (c) {
            var list = c[0] === 'slider' ? gd.layout.sliders : gd.layout.updatemenus;
            return list[c[1]].active || 0;
        });
    }
    function redraw() {
        var a = active();
        var visible = grid.owners.map(function (o) {
            return o.every(function (v, d) { return v < 0 || v === a[d]; });
        });
        var title = grid.title.replace(/\{(\d+)\}/g, function (_, d) { return grid.labels[+d][a[+d]]; });
        Plotly.update(gd, {visible: visible}, {'title.text': title});
    }
    gd.on('plotly_sliderchange', redraw);
    gd.on('plotly_buttonclicked', redraw);
})();
