// Chapter 7's "train here" panel (lengthgen.plots.train_here_html puts it in the page with its data and trainer.js).
//
// The reader picks T, K, a seed and a recipe; the package's own refusals (playground.refusals) are shown in the
// control and keep the train button off. Train starts one Web Worker per encoding (RoPE, APE), made from a Blob of
// the trainer's source carried in the page (so it runs from file:// and offline), draws the loss and the training
// accuracy as they come, then accuracy by length, and sets the precomputed grid's seeds beside it where
// (recipe, T, K) is on the grid. The panel's state is in data-state ("ready", "refused", "training", "done",
// "error"); the last result is in data-result (JSON), for the browser test.
(function () {
    var box = document.getElementById('{panel_id}');
    var spec = JSON.parse(box.querySelector('script.lg-spec').textContent);
    var source = box.querySelector('script.lg-trainer').textContent;
    var url = URL.createObjectURL(new Blob([source], {type: 'text/javascript'}));
    var ENCODINGS = ['rope', 'ape'], NAMES = {rope: 'RoPE', ape: 'APE (learned)'};
    var COLORS = {rope: '#1f77b4', ape: '#d62728'};
    function $(name) { return box.querySelector('[data-lg="' + name + '"]'); }
    var workers = [], runs = {}, started = 0, revision = 0;

    function fill(template, T, K) { return template.replace(/\{T\}/g, String(T)).replace(/\{K\}/g, String(K)); }
    function number(text) { return text.trim() === '' ? NaN : Number(text); }
    function whole(x) { return Number.isFinite(x) && Math.floor(x) === x; }

    function settings() {
        // {T, K, seed, recipe, message}: message is the refusal (the package's where it has one), or ''
        var T = number($('T-value').value), K = number($('K-value').value), seed = number($('seed').value);
        var r = spec.refusals, lo = spec.lengths[0], hi = spec.lengths[1], message = '';
        if (!whole(T)) message = fill(r.T_whole, $('T-value').value, K);
        else if (!whole(K)) message = fill(r.K_whole, T, $('K-value').value);
        else if (T < 1) message = fill(r.T_low, T, K);
        else if (K < 1) message = fill(r.K_low, T, K);
        else if (K >= T) message = fill(r.K_high, T, K);
        else if (T < lo || T > hi) message = 'T=' + T + ': this page trains T from ' + lo + ' to ' + hi +
            ' (the package takes any T > K: lengthgen.train(lengthgen.Config(train_length=' + T + ', offset=' + K + ')))';
        else if (!whole(seed) || seed < spec.seeds[0] || seed > spec.seeds[1])
            message = 'seed=' + $('seed').value + ': give a whole number from ' + spec.seeds[0] + ' to ' + spec.seeds[1];
        return {T: T, K: K, seed: seed, recipe: $('recipe').value, message: message};
    }

    function check() {
        var s = settings();
        $('message').textContent = s.message;
        $('T-range').setAttribute('aria-invalid', String(s.message !== '' && /train_length|T=/.test(s.message)));
        $('K-value').setAttribute('aria-invalid', String(/offset/.test(s.message)));
        $('train').disabled = s.message !== '';
        if (s.message !== '') box.dataset.state = 'refused';
        else if (box.dataset.state === 'refused') box.dataset.state = 'ready';
        $('recipe-text').textContent = s.recipe + ': ' + spec.recipes[s.recipe].text;
        var point = spec.grid.points[s.recipe] && spec.grid.points[s.recipe][s.T + ',' + s.K];
        $('on-grid').textContent = s.message !== '' ? '' : point ?
            'This setting is on the precomputed grid: its ' + spec.grid.seeds.length + ' seeds will be drawn beside yours.' :
            'This setting is not on the precomputed grid: nothing to compare with.';
        return s;
    }

    function link(range, value) {
        range.addEventListener('input', function () { value.value = range.value; check(); });
        value.addEventListener('input', function () {
            var v = number(value.value);
            if (whole(v) && v >= Number(range.min) && v <= Number(range.max)) range.value = v;
            check();
        });
    }
    link($('T-range'), $('T-value'));
    link($('K-range'), $('K-value'));
    $('seed').addEventListener('input', check);
    $('recipe').addEventListener('change', check);

    function drawTraining() {
        var traces = [];
        ENCODINGS.forEach(function (enc) {
            var run = runs[enc];
            if (!run) return;
            traces.push({x: run.steps, y: run.loss, name: NAMES[enc] + ' loss', mode: 'lines', line: {color: COLORS[enc]}});
            traces.push({x: run.steps, y: run.acc, name: NAMES[enc] + ' training accuracy', mode: 'lines', yaxis: 'y2',
                         line: {color: COLORS[enc], dash: 'dot'}});
        });
        Plotly.react($('training'), traces, {
            title: {text: 'training: loss and accuracy on each batch', x: 0.02}, height: 320, margin: {t: 50, b: 50, l: 60, r: 60},
            xaxis: {title: {text: 'step'}}, yaxis: {title: {text: 'loss (cross-entropy)'}, rangemode: 'tozero'},
            yaxis2: {title: {text: 'training accuracy'}, overlaying: 'y', side: 'right', range: [0, 1.02], dtick: 0.25},
            legend: {orientation: 'h', y: -0.25}, plot_bgcolor: 'white', datarevision: ++revision
        }, {displaylogo: false, responsive: true});
    }

    var pending = null;
    function later() {  // redraw the training figure at most every 250 ms (the workers share the reader's cores)
        if (pending === null) pending = setTimeout(function () { pending = null; drawTraining(); }, 250);
    }

    function gridPoint(s) {
        var point = spec.grid.points[s.recipe] && spec.grid.points[s.recipe][s.T + ',' + s.K];
        return point || null;
    }

    function stats(values) {
        var n = values.length, mean = values.reduce(function (a, b) { return a + b; }, 0) / n, ss = 0;
        values.forEach(function (v) { ss += (v - mean) * (v - mean); });
        return {mean: mean, sd: n > 1 ? Math.sqrt(ss / (n - 1)) : 0};
    }

    function compare(s) {
        // per encoding and grid multiple: this run, the grid's seeds, and whether this run lies within
        // 2 sd of the seeds + 3 binomial standard errors of the held-out sample (both the grid's and this run's)
        var point = gridPoint(s), rows = [];
        if (!point) return rows;
        ENCODINGS.forEach(function (enc) {
            spec.grid.multiples.forEach(function (m, i) {
                var at = spec.multiples.indexOf(m);
                if (at < 0 || !runs[enc] || !runs[enc].result) return;
                var seeds = point[enc][i], st = stats(seeds), here = runs[enc].result.accuracy[at];
                var p = Math.min(Math.max(st.mean, 0.5 / spec.samples), 1 - 0.5 / spec.samples);
                var se = Math.sqrt(p * (1 - p) * (1 / spec.samples + 1 / (spec.grid.samples * seeds.length)));
                var allowed = 2 * st.sd + 3 * se;
                rows.push({encoding: enc, multiple: m, here: here, seeds: seeds, mean: st.mean, sd: st.sd, allowed: allowed,
                           agrees: Math.abs(here - st.mean) <= allowed});
            });
        });
        return rows;
    }

    function drawResult(s) {
        var traces = [], point = gridPoint(s), xs = spec.multiples;
        ENCODINGS.forEach(function (enc) {
            var run = runs[enc];
            traces.push({x: xs, y: run.result.accuracy, mode: 'lines+markers', name: NAMES[enc] + ', trained here (seed ' + s.seed + ')',
                         line: {color: COLORS[enc], width: 2.5}, marker: {size: 8}});
            if (point) {
                var gx = [], gy = [];
                spec.grid.multiples.forEach(function (m, i) {
                    point[enc][i].forEach(function (v) { gx.push(m); gy.push(v); });
                });
                traces.push({x: gx, y: gy, mode: 'markers', name: NAMES[enc] + ', the book\'s grid (seeds ' + spec.grid.seeds.join(', ') + ')',
                             marker: {color: COLORS[enc], symbol: 'x-thin-open', size: 11, line: {width: 2}}});
            }
        });
        traces.push({x: [xs[0], xs[xs.length - 1]], y: [spec.chance, spec.chance], mode: 'lines', name: 'chance (1/V)',
                     line: {color: 'black', dash: 'dot', width: 1}});
        Plotly.react($('result'), traces, {
            title: {text: 'accuracy by length: T=' + s.T + ', K=' + s.K + ', ' + s.recipe, x: 0.02}, height: 380,
            margin: {t: 50, b: 60, l: 60, r: 20}, plot_bgcolor: 'white',
            xaxis: {title: {text: 'evaluation length / training length (log scale)'}, type: 'log', tickvals: xs,
                    ticktext: xs.map(function (m) { return m + 'x'; })},
            yaxis: {title: {text: 'accuracy (fraction correct)'}, range: [0, 1.05]}, legend: {orientation: 'h', y: -0.3}
        }, {displaylogo: false, responsive: true});
        var rows = compare(s), table = $('table');
        var head = '<tr><th>encoding</th><th>length</th><th>trained here</th><th>grid seeds</th><th>grid mean ± sd</th><th>within the spread</th></tr>';
        table.innerHTML = rows.length ? head + rows.map(function (r) {
            return '<tr><td>' + NAMES[r.encoding] + '</td><td>' + r.multiple + 'x</td><td>' + r.here.toFixed(3) + '</td><td>' +
                r.seeds.map(function (v) { return v.toFixed(3); }).join(', ') + '</td><td>' + r.mean.toFixed(3) + ' ± ' +
                r.sd.toFixed(3) + '</td><td>' + (r.agrees ? 'yes' : 'no') + ' (|difference| ' +
                Math.abs(r.here - r.mean).toFixed(3) + ', allowed ' + r.allowed.toFixed(3) + ')</td></tr>';
        }).join('') : '';
        return rows;
    }

    function stop() {
        workers.forEach(function (w) { w.terminate(); });
        workers = [];
    }

    function train() {
        var s = check();
        if (s.message !== '') return;
        stop();
        runs = {};
        started = performance.now();
        box.dataset.state = 'training';
        delete box.dataset.result;
        $('table').innerHTML = '';
        $('status').textContent = 'training RoPE and APE in this browser ...';
        var recipe = spec.recipes[s.recipe], done = 0;
        ENCODINGS.forEach(function (enc) {
            var config = Object.assign({}, spec.config, recipe.fields, {train_length: s.T, offset: s.K, encoding: enc});
            var run = runs[enc] = {steps: [], loss: [], acc: [], result: null};
            var worker = new Worker(url);
            workers.push(worker);
            var bar = $('progress-' + enc), label = $('progress-' + enc + '-text');
            bar.max = config.steps;
            bar.value = 0;
            worker.onmessage = function (e) {
                var m = e.data;
                if (m.kind === 'progress') {
                    if (!m.steps.length) return;
                    Array.prototype.push.apply(run.steps, m.steps);
                    Array.prototype.push.apply(run.loss, m.loss);
                    Array.prototype.push.apply(run.acc, m.accuracy);
                    var last = m.steps.length - 1;
                    bar.value = m.steps[last];
                    label.textContent = NAMES[enc] + ': step ' + m.steps[last] + ' of at most ' + m.budget + ', loss ' +
                        m.loss[last].toFixed(3) + ', training accuracy ' + m.accuracy[last].toFixed(3);
                    later();
                } else if (m.kind === 'done') {
                    run.result = m;
                    bar.value = bar.max;
                    label.textContent = NAMES[enc] + ': ' + m.steps + ' steps in ' + m.seconds.toFixed(2) + ' s, evaluated in ' +
                        (m.total - m.seconds).toFixed(2) + ' s';
                    worker.terminate();
                    if (++done === ENCODINGS.length) finish(s);
                } else {
                    box.dataset.state = 'error';
                    $('status').textContent = 'training failed: ' + m.message;
                    stop();
                }
            };
            worker.onerror = function (e) {
                box.dataset.state = 'error';
                $('status').textContent = 'training failed: ' + e.message;
                stop();
            };
            worker.postMessage({cmd: 'train', config: config, seed: s.seed, multiples: spec.multiples, samples: spec.samples,
                                every: 200});
        });
    }

    function finish(s) {
        workers = [];
        if (pending !== null) { clearTimeout(pending); pending = null; }
        drawTraining();
        var rows = drawResult(s), seconds = (performance.now() - started) / 1000;
        $('status').textContent = 'trained and evaluated both in ' + seconds.toFixed(2) + ' s (wall clock, both in parallel)' +
            (rows.length ? '; ' + rows.filter(function (r) { return r.agrees; }).length + ' of ' + rows.length +
             ' grid values agree within the spread' : '');
        var result = {T: s.T, K: s.K, seed: s.seed, recipe: s.recipe, seconds: seconds, comparison: rows, multiples: spec.multiples};
        ENCODINGS.forEach(function (enc) { result[enc] = runs[enc].result; });
        box.dataset.result = JSON.stringify(result);
        box.dataset.state = 'done';
    }

    $('train').addEventListener('click', train);
    check();
    box.dataset.state = $('train').disabled ? 'refused' : 'ready';
})();
