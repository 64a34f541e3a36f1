// The one-layer model of lengthgen, trained in the reader's browser (chapter 7's "train here"), in float64.
//
// The same model and step as lengthgen.tables.TableStep (read at the last query, one layer, residual stream, no
// MLP; RoPE or learned absolute positions) with a hand-written backward pass, and the same AdamW update as
// lengthgen.optim (betas, eps, bias correction, decay before the step on the decayed entries only). Its random
// draws are its own (xoshiro128** seeded by splitmix32, Box-Muller normals): the initial weights and the
// batches are not the package's, so a model trained here is another seed of the same recipe, not the same
// model. tests/test_trainer_js.py checks the step's loss and gradients and an Adam step against the package's
// float64 step in Node.
//
// Matrices are row-major Float64Arrays used as x @ W (a row vector times the matrix): embed (V, d), table (the
// APE rows, max_length x d), wq, wk, wv, wo (d, d), unembed (d, V). Shapes below: V vocabulary, d width,
// L sequence length, B batch.
//
// In a Web Worker it answers {cmd: "train", config, seed, multiples, samples, every} with progress messages and
// one result (see `serve`); in Node it is a module (module.exports).
(function (root) {
    'use strict';

    var NAMES = ['embed', 'table', 'wq', 'wk', 'wv', 'wo', 'unembed'];
    var MATRICES = ['wq', 'wk', 'wv', 'wo', 'unembed'];  // decay_scope "matrices": the tables are not decayed

    // --- random draws ------------------------------------------------------------------------------------
    function random(seed, stream) {
        // xoshiro128** seeded by splitmix32 from (seed, stream): next() in [0, 1) with 53 random bits
        var x = (seed >>> 0) ^ Math.imul(stream >>> 0, 0x9E3779B9);
        function split() {
            x = (x + 0x9E3779B9) | 0;
            var z = x;
            z = Math.imul(z ^ (z >>> 16), 0x85EBCA6B);
            z = Math.imul(z ^ (z >>> 13), 0xC2B2AE35);
            return (z ^ (z >>> 16)) >>> 0;
        }
        var s0 = split(), s1 = split(), s2 = split(), s3 = split();
        function u32() {
            var r = Math.imul(s1, 5);
            r = Math.imul((r << 7) | (r >>> 25), 9) >>> 0;
            var t = s1 << 9;
            s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3; s2 ^= t;
            s3 = (s3 << 11) | (s3 >>> 21);
            return r;
        }
        var spare = null;
        return {
            u32: u32,
            next: function () { return ((u32() >>> 5) * 67108864 + (u32() >>> 6)) / 9007199254740992; },
            int: function (n) { return Math.floor(u32() * n / 4294967296); },  // n < 2^21: exact, one draw
            normal: function () {
                if (spare !== null) { var s = spare; spare = null; return s; }
                var u = 1 - this.next(), v = this.next(), r = Math.sqrt(-2 * Math.log(u));
                spare = r * Math.sin(2 * Math.PI * v);
                return r * Math.cos(2 * Math.PI * v);
            }
        };
    }

    function tokens(rand, V, B, L, out) {
        // B sequences of L i.i.d. uniform tokens (Int32Array (B, L))
        out = out || new Int32Array(B * L);
        for (var i = 0; i < B * L; i++) out[i] = rand.int(V);
        return out;
    }

    // --- the model -------------------------------------------------------------------------------------
    function init(c, seed) {
        // initial weights as lengthgen.Model draws them (the same scales, other draws): embedding and APE rows
        // N(0, init_scale^2 / d), every matrix N(0, 1 / d)
        var V = c.vocab, d = c.dim, rand = random(seed, 0), es = c.init_scale / Math.sqrt(d), ws = 1 / Math.sqrt(d);
        function draw(n, std) { var a = new Float64Array(n); for (var i = 0; i < n; i++) a[i] = rand.normal() * std; return a; }
        var p = {embed: draw(V * d, es)};
        p.table = c.encoding === 'ape' ? draw(c.max_length * d, es) : new Float64Array(0);
        p.wq = draw(d * d, ws); p.wk = draw(d * d, ws); p.wv = draw(d * d, ws); p.wo = draw(d * d, ws);
        p.unembed = draw(d * V, ws);
        return p;
    }

    // Products of row-major matrices, written into C (m, n) or added to it (add): loops in the order that reads
    // memory in turn
    function mmInto(m, n, k, A, B, C, add) {  // C = A (m, k) @ B (k, n); four rows of B at a time
        C = C || new Float64Array(m * n);
        for (var i = 0; i < m; i++) {
            var ci = i * n, ai = i * k, l = 0, j;
            if (!add) for (j = 0; j < n; j++) C[ci + j] = 0;
            for (; l + 3 < k; l += 4) {
                var a0 = A[ai + l], a1 = A[ai + l + 1], a2 = A[ai + l + 2], a3 = A[ai + l + 3];
                var b0 = l * n, b1 = b0 + n, b2 = b1 + n, b3 = b2 + n;
                for (j = 0; j < n; j++) C[ci + j] += a0 * B[b0 + j] + a1 * B[b1 + j] + a2 * B[b2 + j] + a3 * B[b3 + j];
            }
            for (; l < k; l++) {
                var a = A[ai + l], bl = l * n;
                for (j = 0; j < n; j++) C[ci + j] += a * B[bl + j];
            }
        }
        return C;
    }
    function mtmInto(m, n, k, A, B, C, add) {  // C = A (k, m)^T @ B (k, n); four rows of B at a time
        C = C || new Float64Array(m * n);
        if (!add) C.fill(0);
        var l = 0, i, j;
        for (; l + 3 < k; l += 4) {
            var b0 = l * n, b1 = b0 + n, b2 = b1 + n, b3 = b2 + n;
            for (i = 0; i < m; i++) {
                var a0 = A[l * m + i], a1 = A[(l + 1) * m + i], a2 = A[(l + 2) * m + i], a3 = A[(l + 3) * m + i], ci = i * n;
                for (j = 0; j < n; j++) C[ci + j] += a0 * B[b0 + j] + a1 * B[b1 + j] + a2 * B[b2 + j] + a3 * B[b3 + j];
            }
        }
        for (; l < k; l++) {
            var bl = l * n;
            for (i = 0; i < m; i++) {
                var a = A[l * m + i], ck = i * n;
                for (j = 0; j < n; j++) C[ck + j] += a * B[bl + j];
            }
        }
        return C;
    }
    function mmtInto(m, n, k, A, B, C, add) {  // C = A (m, k) @ B (n, k)^T
        C = C || new Float64Array(m * n);
        for (var i = 0; i < m; i++) {
            var ai = i * k;
            for (var j = 0; j < n; j++) {
                var s = 0, bj = j * k;
                for (var l = 0; l < k; l++) s += A[ai + l] * B[bj + l];
                if (add) C[i * n + j] += s; else C[i * n + j] = s;
            }
        }
        return C;
    }

    // Working arrays, made once per (encoding, sizes, length) and reused by every step (a few kept)
    var SPACES = new Map();
    function space(c, L) {
        var key = [c.encoding, c.vocab, c.dim, c.max_length, c.rope_base, L].join();
        var ws = SPACES.get(key);
        if (ws === undefined) {
            if (SPACES.size >= 8) SPACES.delete(SPACES.keys().next().value);
            ws = {arrays: {}, trigOf: null};
            SPACES.set(key, ws);
        }
        return ws;
    }
    function zeros(ws, name, n) {  // ws's array ``name`` of n zeros
        var a = ws.arrays[name];
        if (a === undefined || a.length !== n) a = ws.arrays[name] = new Float64Array(n);
        else a.fill(0);
        return a;
    }

    function tables(c, p, L) {
        // What every sequence of length L reads (O(V^2 L d) once per step): the attention logit of the last query
        // (token a) on key j (token b) and the read-out a unit of attention on a token / position adds.
        var V = c.vocab, d = c.dim, VV = V * V, ape = c.encoding === 'ape', scale = 1 / Math.sqrt(d);
        var ws = space(c, L), t = {L: L, ws: ws};
        function mm(m, n, k, A, B) { return mmInto(m, n, k, A, B, zeros(ws, 'mm' + (ws.n++), m * n), true); }
        function mmt(m, n, k, A, B) { return mmtInto(m, n, k, A, B, zeros(ws, 'mm' + (ws.n++), m * n), true); }
        ws.n = 0;
        var WoU = t.WoU = mm(d, V, d, p.wo, p.unembed);
        t.AvE = mm(V, d, d, p.embed, p.wv);
        t.YvE = mm(V, V, d, t.AvE, WoU);  // (V, V): E Wv Wo U
        t.R = mm(V, V, d, p.embed, p.unembed);  // the query's own input read out: E U (+ P_(L-1) U)
        if (ape) {
            var P = t.P = p.table.subarray(0, L * d), last = p.table.subarray((L - 1) * d, L * d);
            t.Xq = zeros(ws, 'Xq', V * d);  // E + P_(L-1)
            for (var a = 0; a < V; a++) for (var i = 0; i < d; i++) t.Xq[a * d + i] = p.embed[a * d + i] + last[i];
            t.Q = mm(V, d, d, t.Xq, p.wq);
            t.Ek = mm(V, d, d, p.embed, p.wk);
            t.Pk = mm(L, d, d, P, p.wk);
            t.AvP = mm(L, d, d, P, p.wv);
            t.YvP = mm(L, V, d, t.AvP, WoU);  // (L, V)
            t.Rlast = mm(1, V, d, last, p.unembed);
            t.TE = mmt(V, V, d, t.Ek, t.Q);  // TE[b, a] = k(b) . q(a)
            t.TP = mmt(L, V, d, t.Pk, t.Q);  // TP[j, a] = P_j Wk . q(a)
            for (var i2 = 0; i2 < VV; i2++) t.TE[i2] *= scale;
            for (var i3 = 0; i3 < L * V; i3++) t.TP[i3] *= scale;
        } else {
            // RoPE: logit of key j = sum_p cos(D theta_p) C_p[a, b] + sin(D theta_p) S_p[a, b], D = L-1-j, with
            // C_p = q_e k_e + q_o k_o and S_p = q_e k_o - q_o k_e over pair p's two dimensions
            var h = d / 2;
            t.Q = mm(V, d, d, p.embed, p.wq);
            t.K = mm(V, d, d, p.embed, p.wk);
            var CS = t.CS = zeros(ws, 'CS', d * VV);  // rows 2p: C_p[b, a]; rows 2p + 1: S_p[b, a]
            for (var q = 0; q < h; q++) {
                for (var b = 0; b < V; b++) {
                    var ke = t.K[b * d + 2 * q], ko = t.K[b * d + 2 * q + 1];
                    for (var a2 = 0; a2 < V; a2++) {
                        var qe = t.Q[a2 * d + 2 * q], qo = t.Q[a2 * d + 2 * q + 1];
                        CS[2 * q * VV + b * V + a2] = qe * ke + qo * ko;
                        CS[(2 * q + 1) * VV + b * V + a2] = qe * ko - qo * ke;
                    }
                }
            }
            var trig = t.trig = ws.trig || (ws.trig = new Float64Array(L * d));  // trig[D, 2p] = cos(D theta_p) / sqrt(d), [D, 2p+1] = sin
            for (var D = 0; D < L && !ws.trigDone; D++) {
                for (var q2 = 0; q2 < h; q2++) {
                    var angle = D * Math.pow(c.rope_base, -(2 * q2) / d);
                    trig[D * d + 2 * q2] = Math.cos(angle) * scale;
                    trig[D * d + 2 * q2 + 1] = Math.sin(angle) * scale;
                }
            }
            ws.trigDone = true;
            t.T = mm(L, VV, d, trig, CS);  // T[D, b, a]
        }
        return t;
    }

    function attention(c, t, x, o, attn, ao, mass, mo) {
        // one sequence x[o .. o + L): the last query's attention over its keys into attn[ao .. ao + L) and the
        // attention on each token into mass[mo .. mo + V)
        var V = c.vocab, L = t.L, VV = V * V, a = x[o + L - 1], ape = c.encoding === 'ape', top = -Infinity, j;
        for (j = 0; j < L; j++) {
            var s = ape ? t.TE[x[o + j] * V + a] + t.TP[j * V + a] : t.T[(L - 1 - j) * VV + x[o + j] * V + a];
            attn[ao + j] = s;
            if (s > top) top = s;
        }
        var sum = 0;
        for (j = 0; j < L; j++) { attn[ao + j] = Math.exp(attn[ao + j] - top); sum += attn[ao + j]; }
        for (var b = 0; b < V; b++) mass[mo + b] = 0;
        for (j = 0; j < L; j++) { attn[ao + j] /= sum; mass[mo + x[o + j]] += attn[ao + j]; }
    }

    function logitsOf(c, t, x, o, attn, mass, z) {
        // one sequence's attention (attn, L), mass on each token (V) and logits (V)
        var V = c.vocab, L = t.L, a = x[o + L - 1], ape = c.encoding === 'ape', j, k, b;
        attention(c, t, x, o, attn, 0, mass, 0);
        for (k = 0; k < V; k++) z[k] = t.R[a * V + k] + (ape ? t.Rlast[k] : 0);
        for (b = 0; b < V; b++) {
            var w = mass[b];
            if (w !== 0) for (k = 0; k < V; k++) z[k] += w * t.YvE[b * V + k];
        }
        if (ape) for (j = 0; j < L; j++) { var wj = attn[j]; for (k = 0; k < V; k++) z[k] += wj * t.YvP[j * V + k]; }
    }

    function transpose(ws, name, A, m, n) {  // A (m, n)^T into ws's array ``name``
        var T = zeros(ws, name, m * n);
        for (var i = 0; i < m; i++) for (var j = 0; j < n; j++) T[j * m + i] = A[i * n + j];
        return T;
    }

    function argmax(z, n) { var best = 0; for (var k = 1; k < n; k++) if (z[k] > z[best]) best = k; return best; }

    var SOFTPLUS_THRESHOLD = 30;  // lengthgen.model.SOFTPLUS_THRESHOLD

    function step(c, p, x, B, L) {
        // The training step on tokens x (Int32Array (B, L)), targets K back from the last token: the mean
        // log-likelihood of the targets, the correct predictions, and the gradient of the mean cross-entropy by
        // every parameter (an object like p; the APE rows past L get none: zeros)
        var V = c.vocab, d = c.dim, VV = V * V, K = c.offset, ape = c.encoding === 'ape', scale = 1 / Math.sqrt(d);
        var t = tables(c, p, L), ws = t.ws;
        function mm(m, n, k, A, B, C, add) { return mmInto(m, n, k, A, B, C || zeros(ws, 'g' + (ws.n++), m * n), add); }
        function mtm(m, n, k, A, B, C, add) { return mtmInto(m, n, k, A, B, C || zeros(ws, 'g' + (ws.n++), m * n), add); }
        function mmt(m, n, k, A, B, C, add) { return mmtInto(m, n, k, A, B, C || zeros(ws, 'g' + (ws.n++), m * n), add); }
        // the batch's attention ATT (B, L) and mass on each token MA (B, V), then its logits Z (B, V) as products
        var ATT = zeros(ws, 'ATT', B * L), MA = zeros(ws, 'MA', B * V), Z = zeros(ws, 'Z', B * V), Gz = zeros(ws, 'Gz', B * V);
        var GR = zeros(ws, 'GR', VV), GRlast = zeros(ws, 'GRlast', V);
        var GT = ape ? null : zeros(ws, 'GT', L * VV), GTE = ape ? zeros(ws, 'GTE', VV) : null;
        var GTP = ape ? zeros(ws, 'GTP', L * V) : null;
        var loglik = 0, correct = 0, j, k, n, b;
        for (n = 0; n < B; n++) {
            var o = n * L, a = x[o + L - 1];
            attention(c, t, x, o, ATT, o, MA, n * V);
            for (k = 0; k < V; k++) Z[n * V + k] = t.R[a * V + k] + (ape ? t.Rlast[k] : 0);
        }
        mmInto(B, V, V, MA, t.YvE, Z, true);
        if (ape) mmInto(B, V, L, ATT, t.YvP, Z, true);
        for (n = 0; n < B; n++) {
            // -log p_t = softplus(r), r = log(sum of the other probabilities) - log p_t (lengthgen.model)
            var zo = n * V, tg = x[n * L + L - 1 - K], top = Z[zo], best = 0;
            for (k = 1; k < V; k++) if (Z[zo + k] > top) { top = Z[zo + k]; best = k; }
            if (best === tg) correct++;
            var zs = 0;
            for (k = 0; k < V; k++) { Gz[zo + k] = Math.exp(Z[zo + k] - top); zs += Gz[zo + k]; }
            var lse = Math.log(zs) + top, others = 0;
            for (k = 0; k < V; k++) { Gz[zo + k] /= zs; if (k !== tg) others += Gz[zo + k]; }
            var r = Math.log(others) - (Z[zo + tg] - lse);
            loglik -= r > SOFTPLUS_THRESHOLD ? r : Math.log1p(Math.exp(r));
            Gz[zo + tg] = -others;
            for (k = 0; k < V; k++) { Gz[zo + k] /= B; GR[x[n * L + L - 1] * V + k] += Gz[zo + k]; }
        }
        // backward through the logits' products, then each sequence's softmax into the logit tables' gradients
        var GYvE = mtm(V, V, B, MA, Gz), GM = mm(B, V, V, Gz, transpose(ws, 'YvET', t.YvE, V, V));
        var GYvP = ape ? mtm(L, V, B, ATT, Gz) : null, GA = ape ? mm(B, L, V, Gz, transpose(ws, 'YvPT', t.YvP, L, V)) : null;
        var gAttn = zeros(ws, 'gAttn', L);
        for (n = 0; n < B; n++) {
            var on = n * L, an = x[on + L - 1], dot = 0, gm = n * V;
            for (j = 0; j < L; j++) {
                var ga = GM[gm + x[on + j]] + (ape ? GA[on + j] : 0);
                dot += ATT[on + j] * ga;
                gAttn[j] = ga;
            }
            for (j = 0; j < L; j++) {
                var gs = ATT[on + j] * (gAttn[j] - dot);
                if (ape) { GTE[x[on + j] * V + an] += gs; GTP[j * V + an] += gs; }
                else GT[(L - 1 - j) * VV + x[on + j] * V + an] += gs;
            }
        }
        loglik /= B;
        // the tables' gradients into the parameters'
        var G = ws.G;  // the gradient, reused by the next step of this length (the APE rows past L stay zero)
        var rows = ape ? p.table.length : 0;  // RoPE's weights may come without a table
        if (G === undefined || G.table.length !== rows) {
            G = ws.G = {embed: new Float64Array(V * d), table: new Float64Array(rows),
                        wq: new Float64Array(d * d), wk: new Float64Array(d * d), wv: new Float64Array(d * d),
                        wo: new Float64Array(d * d), unembed: new Float64Array(d * V)};
        } else {
            NAMES.forEach(function (name) { (name === 'table' ? G.table.subarray(0, L * d) : G[name]).fill(0); });
        }
        var GP = ape ? G.table.subarray(0, L * d) : null, GPlast = ape ? G.table.subarray((L - 1) * d, L * d) : null;
        var GQ, i;
        // read-out: logits += (E_a + P_(L-1)) U
        mtm(d, V, V, p.embed, GR, G.unembed, true);
        mmt(V, d, V, GR, p.unembed, G.embed, true);
        for (var a3 = 0; a3 < V; a3++) for (k = 0; k < V; k++) GRlast[k] += GR[a3 * V + k];
        if (ape) {
            var last = p.table.subarray((L - 1) * d, L * d);
            for (i = 0; i < d; i++) for (k = 0; k < V; k++) G.unembed[i * V + k] += last[i] * GRlast[k];
            mmt(1, d, V, GRlast, p.unembed, GPlast, true);
        }
        // values: Yv = Av WoU, Av = [E; P] Wv, WoU = Wo U
        var GWoU = mtm(d, V, V, t.AvE, GYvE);
        var GAvE = mmt(V, d, V, GYvE, t.WoU);
        mtm(d, d, V, p.embed, GAvE, G.wv, true);
        mmt(V, d, d, GAvE, p.wv, G.embed, true);
        if (ape) {
            mtm(d, V, L, t.AvP, GYvP, GWoU, true);
            var GAvP = mmt(L, d, V, GYvP, t.WoU);
            mtm(d, d, L, t.P, GAvP, G.wv, true);
            mmt(L, d, d, GAvP, p.wv, GP, true);
        }
        mmt(d, d, V, GWoU, p.unembed, G.wo, true);
        mtm(d, V, d, p.wo, GWoU, G.unembed, true);
        // logits
        if (ape) {
            GQ = mtm(V, d, V, GTE, t.Ek);  // sum_b GTE[b, a] Ek[b]
            mtm(V, d, L, GTP, t.Pk, GQ, true);
            for (i = 0; i < V * d; i++) GQ[i] *= scale;
            var GEk = mm(V, d, V, GTE, t.Q), GPk = mm(L, d, V, GTP, t.Q);
            for (i = 0; i < V * d; i++) GEk[i] *= scale;
            for (i = 0; i < L * d; i++) GPk[i] *= scale;
            mtm(d, d, V, t.Xq, GQ, G.wq, true);
            mmt(V, d, d, GQ, p.wq, G.embed, true);
            var GQsum = zeros(ws, 'GQsum', d);
            for (var a4 = 0; a4 < V; a4++) for (i = 0; i < d; i++) GQsum[i] += GQ[a4 * d + i];
            mmt(1, d, d, GQsum, p.wq, GPlast, true);
            mtm(d, d, V, p.embed, GEk, G.wk, true);
            mtm(d, d, L, t.P, GPk, G.wk, true);
            mmt(V, d, d, GEk, p.wk, G.embed, true);
            mmt(L, d, d, GPk, p.wk, GP, true);
        } else {
            var GCS = mtm(d, VV, L, t.trig, GT);  // (d, V^2): rows 2p the gradient by C_p[b, a], 2p + 1 by S_p
            GQ = zeros(ws, 'GQ', V * d);
            var GK = zeros(ws, 'GK', V * d);
            for (var q = 0; q < d / 2; q++) {
                var rc = 2 * q * VV, rs = (2 * q + 1) * VV;
                for (b = 0; b < V; b++) {
                    var ke = t.K[b * d + 2 * q], ko = t.K[b * d + 2 * q + 1], gke = 0, gko = 0;
                    for (var a5 = 0; a5 < V; a5++) {
                        var gc = GCS[rc + b * V + a5], gsn = GCS[rs + b * V + a5];
                        var qe = t.Q[a5 * d + 2 * q], qo = t.Q[a5 * d + 2 * q + 1];
                        GQ[a5 * d + 2 * q] += gc * ke + gsn * ko;
                        GQ[a5 * d + 2 * q + 1] += gc * ko - gsn * ke;
                        gke += gc * qe - gsn * qo;
                        gko += gc * qo + gsn * qe;
                    }
                    GK[b * d + 2 * q] = gke;
                    GK[b * d + 2 * q + 1] = gko;
                }
            }
            mtm(d, d, V, p.embed, GQ, G.wq, true);
            mmt(V, d, d, GQ, p.wq, G.embed, true);
            mtm(d, d, V, p.embed, GK, G.wk, true);
            mmt(V, d, d, GK, p.wk, G.embed, true);
        }
        return {loglik: loglik, correct: correct, grad: G};
    }

    // --- AdamW (lengthgen.optim.Optimizer, rule "adam") ----------------------------------------------------
    function adam(c, p) {
        var m = {}, v = {};
        NAMES.forEach(function (name) {
            var n = p[name] ? p[name].length : 0;
            m[name] = new Float64Array(n); v[name] = new Float64Array(n);
        });
        return {t: 0, m: m, v: v};
    }

    function adamStep(c, state, p, G, rows) {
        // One AdamW step in place, as lengthgen.optim.adam_step: decay p <- p - lr wd p on the decayed
        // parameters first, then p <- p - lr m_hat / (sqrt(v_hat) + eps). ``rows``: the APE rows updated (those
        // trained; the others get no gradient and, without decay on the tables, never move)
        state.t += 1;
        var b1 = c.betas[0], b2 = c.betas[1], eps = c.eps, t = state.t;
        var rate = c.lr, step = c.lr / (1 - Math.pow(b1, t)), root2 = 1 / Math.sqrt(1 - Math.pow(b2, t));
        NAMES.forEach(function (name) {
            var x = p[name], g = G[name], m = state.m[name], v = state.v[name];
            if (!x) return;
            var n = name === 'table' && rows != null ? Math.min(x.length, rows * c.dim) : x.length;
            var decayed = c.weight_decay > 0 && (c.decay_scope === 'all' || MATRICES.indexOf(name) >= 0);
            if (decayed) { var f = rate * c.weight_decay; for (var i = 0; i < n; i++) x[i] -= f * x[i]; }
            for (var k = 0; k < n; k++) {
                var gk = g[k], mk = m[k] * b1 + (1 - b1) * gk, vk = v[k] * b2 + (1 - b2) * (gk * gk);
                m[k] = mk; v[k] = vk;
                x[k] -= step * mk / (Math.sqrt(vk) * root2 + eps);
            }
        });
    }

    // --- training and evaluation -------------------------------------------------------------------------
    function accuracy(c, p, L, samples, seed) {
        // fraction of ``samples`` held-out sequences of length L (own stream: never drawn in training) answered
        var V = c.vocab, t = tables(c, p, L), x = tokens(random(seed, 2 + L), V, samples, L);
        var attn = new Float64Array(L), mass = new Float64Array(V), z = new Float64Array(V), right = 0;
        for (var n = 0; n < samples; n++) {
            logitsOf(c, t, x, n * L, attn, mass, z);
            if (argmax(z, V) === x[n * L + L - 1 - c.offset]) right++;
        }
        return right / samples;
    }

    function train(c, seed, onStep) {
        // Adam for c.steps steps on fresh batches, stopped early once the training accuracy averaged over the
        // last c.stop_window batches reaches c.target_accuracy (null: no early stop). onStep(step, loss, acc)
        // hears of every step; returning false stops. Returns the weights and how training ended.
        var p = init(c, seed), state = adam(c, p), rand = random(seed, 1), B = c.batch, L = c.train_length;
        var x = new Int32Array(B * L), window = [], steps = 0, loss = NaN, acc = NaN, rows = L;
        if (c.weight_decay > 0 && c.decay_scope === 'all') rows = null;
        for (var s = 0; s < c.steps; s++) {
            tokens(rand, c.vocab, B, L, x);
            var out = step(c, p, x, B, L);
            adamStep(c, state, p, out.grad, rows);
            steps = s + 1; loss = -out.loglik; acc = out.correct / B;
            if (onStep && onStep(steps, loss, acc) === false) break;
            if (c.target_accuracy != null) {
                window.push(acc);
                if (window.length > c.stop_window) window.shift();
                if (window.length === c.stop_window &&
                    window.reduce(function (u, w) { return u + w; }, 0) / c.stop_window >= c.target_accuracy) break;
            }
        }
        return {params: p, steps: steps, loss: loss, accuracy: acc};
    }

    function serve(scope) {
        // the worker's side: {cmd: "train", config, seed, multiples, samples, every} -> {kind: "progress", steps,
        // loss, accuracy: the steps since the last message (arrays), budget} at most every ``every`` ms, then
        // {kind: "done", steps, seconds (training), lengths, accuracy, total (with the evaluation)}
        scope.onmessage = function (e) {
            var job = e.data, c = job.config, start = Date.now(), shown = start, news = {steps: [], loss: [], accuracy: []};
            function post() {
                scope.postMessage({kind: 'progress', steps: news.steps, loss: news.loss, accuracy: news.accuracy, budget: c.steps});
                news = {steps: [], loss: [], accuracy: []};
            }
            try {
                var done = train(c, job.seed, function (s, loss, acc) {
                    news.steps.push(s); news.loss.push(loss); news.accuracy.push(acc);
                    var now = Date.now();
                    if (now - shown >= (job.every || 100)) { shown = now; post(); }
                });
                var seconds = (Date.now() - start) / 1000;
                post();
                var lengths = job.multiples.map(function (m) { return m * c.train_length; });
                var accs = lengths.map(function (L) { return accuracy(c, done.params, L, job.samples, job.seed); });
                scope.postMessage({kind: 'done', steps: done.steps, seconds: seconds, lengths: lengths, accuracy: accs,
                                   total: (Date.now() - start) / 1000});
            } catch (err) {
                scope.postMessage({kind: 'error', message: String(err && err.message || err)});
            }
        };
    }

    var api = {NAMES: NAMES, random: random, tokens: tokens, init: init, tables: tables, step: step, adam: adam,
               adamStep: adamStep, accuracy: accuracy, train: train, serve: serve};
    if (typeof module !== 'undefined' && module.exports) module.exports = api;
    else if (typeof WorkerGlobalScope !== 'undefined' && root instanceof WorkerGlobalScope) serve(root);
    else root.lengthgenTrainer = api;
})(typeof self !== 'undefined' ? self : this);
