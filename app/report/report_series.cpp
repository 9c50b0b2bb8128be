#include "report_series.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dlion::report {

namespace {

// Mean of `value(record)` per time bin; bins without records are skipped.
template <typename F>
Series binned(const QString &name, const QList<protocol::RoundRecord> &rounds, double span, int bins, F value)
{
    Series s{name, {}, {}};
    QVector<double> sum(bins, 0.0);
    QVector<int> n(bins, 0);
    for (const auto &r : rounds) {
        const int b = std::clamp(int(r.t / span * bins), 0, bins - 1);
        sum[b] += value(r);
        ++n[b];
    }
    for (int b = 0; b < bins; ++b) {
        if (n[b] > 0) {
            s.x.append((b + 0.5) * span / bins);
            s.y.append(sum[b] / n[b]);
        }
    }
    return s;
}

Heatmap linkHeatmap(const core::RunData &data, double span, int bins, bool fraction)
{
    Heatmap h;
    const int w = data.workers();
    h.cols = bins;
    h.t0 = 0;
    h.t1 = span;
    bool any = false;
    QVector<double> sum, n;
    for (int i = 0; i < w; ++i) {
        for (int j = 0; j < w; ++j) {
            if (i == j)
                continue;
            QVector<double> rowSum(bins, 0.0), rowN(bins, 0.0);
            for (const auto &r : data.rounds(i)) {
                const auto &v = fraction ? r.linkFraction : r.linkMbps;
                if (size_t(j) >= v.size())
                    continue;
                const int b = std::clamp(int(r.t / span * bins), 0, bins - 1);
                rowSum[b] += v[size_t(j)];
                rowN[b] += 1;
                any = any || v[size_t(j)] != 0;
            }
            h.rows << QStringLiteral("%1→%2").arg(i).arg(j);
            sum += rowSum;
            n += rowN;
        }
    }
    if (!any)
        return Heatmap{};
    h.values.resize(sum.size());
    h.min = std::numeric_limits<double>::infinity();
    h.max = -h.min;
    // A bin without rounds (an evaluation pause) keeps the link's last value.
    for (qsizetype k = 0; k < sum.size(); ++k) {
        const bool rowStart = k % bins == 0;
        h.values[k] = n[k] > 0 ? sum[k] / n[k] : rowStart ? std::nan("") : h.values[k - 1];
        if (n[k] > 0) {
            h.min = std::min(h.min, h.values[k]);
            h.max = std::max(h.max, h.values[k]);
        }
    }
    return h;
}

} // namespace

ReportSeries ReportSeries::from(const core::RunData &data, int bins)
{
    ReportSeries s;
    s.trainS = std::max(1e-3, data.trainingSeconds());
    if (bins <= 0)
        bins = std::clamp(int(std::ceil(s.trainS)), 10, 80);
    s.accuracyVsTime.name = s.accuracyVsStep.name = QStringLiteral("test accuracy (mean replica)");
    s.evalLossVsTime.name = QStringLiteral("test loss");
    for (int w = 0; w < data.workers(); ++w)
        s.workerAccuracy.append({QStringLiteral("worker %1").arg(w), {}, {}});
    for (const auto &e : data.evals()) {
        if (e.primary) {
            s.accuracyVsTime.x.append(e.t);
            s.accuracyVsTime.y.append(e.globalAccuracy);
            s.accuracyVsStep.x.append(double(e.round));
            s.accuracyVsStep.y.append(e.globalAccuracy);
            s.evalLossVsTime.x.append(e.t);
            s.evalLossVsTime.y.append(e.globalLoss);
        }
        if (e.worker >= 0 && e.worker < s.workerAccuracy.size()) {
            s.workerAccuracy[e.worker].x.append(e.t);
            s.workerAccuracy[e.worker].y.append(e.accuracy);
        }
    }
    QList<protocol::RoundRecord> all;
    qint64 maxRound = 1;
    for (int w = 0; w < data.workers(); ++w) {
        all += data.rounds(w);
        if (!data.rounds(w).isEmpty())
            maxRound = std::max(maxRound, data.rounds(w).constLast().round + 1);
        s.shares.append(binned(QStringLiteral("worker %1").arg(w), data.rounds(w), s.trainS, bins,
                               [](const protocol::RoundRecord &r) { return r.share; }));
        s.rates.append(binned(QStringLiteral("worker %1").arg(w), data.rounds(w), s.trainS, bins,
                              [](const protocol::RoundRecord &r) { return r.rate; }));
    }
    s.trainLossVsTime = binned(QStringLiteral("training loss (mean of workers)"), all, s.trainS, bins,
                               [](const protocol::RoundRecord &r) { return r.loss; });
    // Per round bin: reuse the time binning with the round number as "time".
    QList<protocol::RoundRecord> byRound = all;
    for (auto &r : byRound)
        r.t = double(r.round);
    s.trainLossVsStep = binned(s.trainLossVsTime.name, byRound, double(maxRound), bins,
                               [](const protocol::RoundRecord &r) { return r.loss; });
    s.bandwidth = linkHeatmap(data, s.trainS, bins, false);
    s.priority = linkHeatmap(data, s.trainS, bins, true);
    s.merges = data.merges();
    return s;
}

} // namespace dlion::report
