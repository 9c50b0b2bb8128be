#include "telemetry.h"

#include <QCborArray>
#include <QHash>
#include <QJsonArray>

#include <algorithm>

namespace dlion::protocol {

namespace {

QCborArray toArray(const std::vector<double> &v)
{
    QCborArray a;
    for (double d : v)
        a.append(d);
    return a;
}

bool readArray(const QCborValue &v, std::vector<double> *out)
{
    if (v.isUndefined())
        return true;
    if (!v.isArray())
        return false;
    const QCborArray a = v.toArray();
    out->reserve(a.size());
    for (const QCborValue &x : a) {
        if (!x.isDouble() && !x.isInteger())
            return false;
        out->push_back(x.toDouble());
    }
    return true;
}

QJsonArray toJsonArray(const std::vector<double> &v)
{
    QJsonArray a;
    for (double d : v)
        a.append(d);
    return a;
}

// Field codes keep telemetry frames small; the JSON forms use full names.
QCborMap encode(const RoundRecord &r)
{
    return QCborMap{{"w", r.worker}, {"r", r.round}, {"t", r.t}, {"b", r.batch}, {"sh", r.share},
                    {"rt", r.rate}, {"cs", r.computeS}, {"ms", r.commS}, {"l", r.loss},
                    {"sd", r.slowdown}, {"by", r.bytesSent}, {"pd", qint64(r.paramDigest)}, {"lb", toArray(r.linkBytes)}, {"bw", toArray(r.linkMbps)},
                    {"fr", toArray(r.linkFraction)}};
}

bool decode(const QCborMap &m, RoundRecord *r)
{
    r->worker = int(m.value("w").toInteger());
    r->round = m.value("r").toInteger();
    r->t = m.value("t").toDouble();
    r->batch = int(m.value("b").toInteger());
    r->share = m.value("sh").toDouble();
    r->rate = m.value("rt").toDouble();
    r->computeS = m.value("cs").toDouble();
    r->commS = m.value("ms").toDouble();
    r->loss = m.value("l").toDouble();
    r->slowdown = m.value("sd").toDouble(1.0);
    r->bytesSent = m.value("by").toInteger();
    r->paramDigest = quint64(m.value("pd").toInteger());
    return readArray(m.value("lb"), &r->linkBytes) && readArray(m.value("bw"), &r->linkMbps) && readArray(m.value("fr"), &r->linkFraction);
}

QCborMap encode(const EvalRecord &e)
{
    return QCborMap{{"w", e.worker}, {"r", e.round}, {"t", e.t}, {"a", e.accuracy}, {"l", e.loss},
                    {"ga", e.globalAccuracy}, {"gl", e.globalLoss}, {"mn", e.minAccuracy}, {"mx", e.maxAccuracy},
                    {"ca", e.consensusAccuracy}, {"n", e.samples}, {"f", e.final}, {"p", e.primary}};
}

bool decode(const QCborMap &m, EvalRecord *e)
{
    e->worker = int(m.value("w").toInteger());
    e->round = m.value("r").toInteger();
    e->t = m.value("t").toDouble();
    e->accuracy = m.value("a").toDouble();
    e->loss = m.value("l").toDouble();
    e->globalAccuracy = m.value("ga").toDouble();
    e->globalLoss = m.value("gl").toDouble();
    e->minAccuracy = m.value("mn").toDouble();
    e->maxAccuracy = m.value("mx").toDouble();
    e->consensusAccuracy = m.value("ca").toDouble();
    e->samples = int(m.value("n").toInteger());
    e->final = m.value("f").toBool();
    e->primary = m.contains(QLatin1String("p")) ? m.value("p").toBool() : e->worker == 0;
    return true;
}

QCborMap encode(const MergeEvent &m)
{
    return QCborMap{{"r", m.round}, {"t", m.t}, {"fr", m.from}, {"to", m.to}, {"sb", m.scoreBefore},
                    {"sf", m.scoreFrom}, {"al", m.alpha}, {"mn", m.manual}};
}

bool decode(const QCborMap &c, MergeEvent *m)
{
    m->round = c.value("r").toInteger();
    m->t = c.value("t").toDouble();
    m->from = int(c.value("fr").toInteger());
    m->to = int(c.value("to").toInteger());
    m->scoreBefore = c.value("sb").toDouble();
    m->scoreFrom = c.value("sf").toDouble();
    m->alpha = c.value("al").toDouble();
    m->manual = c.value("mn").toBool();
    return true;
}

QCborMap encode(const DataSummary &d)
{
    QCborArray histogram;
    for (const qint64 n : d.histogram)
        histogram.append(n);
    return QCborMap{{"w", d.worker}, {"ds", d.dataset}, {"dd", d.dataDir}, {"n", d.samples}, {"tn", d.testSamples},
                    {"h", histogram}};
}

bool decode(const QCborMap &m, DataSummary *d)
{
    d->worker = int(m.value("w").toInteger());
    d->dataset = m.value("ds").toString();
    d->dataDir = m.value("dd").toString();
    d->samples = m.value("n").toInteger();
    d->testSamples = m.value("tn").toInteger();
    const QCborValue h = m.value("h");
    for (const QCborValue &x : h.toArray()) {
        if (!x.isInteger())
            return false;
        d->histogram.append(x.toInteger());
    }
    return h.isArray() || h.isUndefined();
}

template <typename T>
QCborArray encodeList(const QList<T> &items)
{
    QCborArray a;
    for (const T &item : items)
        a.append(encode(item));
    return a;
}

// A batch's map keys, array headers and seq, rounded up.
constexpr qsizetype kBatchOverheadBytes = 64;

template <typename T>
void splitList(const QList<T> &items, QList<T> TelemetryBatch::*list, qsizetype maxBytes, QList<TelemetryBatch> &out,
               qsizetype &used)
{
    for (const T &item : items) {
        const qsizetype size = encode(item).toCborValue().toCbor().size();
        if (out.isEmpty() || (used + size > maxBytes && !out.last().isEmpty())) {
            out.append(TelemetryBatch{});
            used = kBatchOverheadBytes;
        }
        (out.last().*list).append(item);
        used += size;
    }
}

template <typename T>
void dropFront(QList<T> &items, qsizetype &count)
{
    const qsizetype n = std::min(count, items.size());
    items.remove(0, n);
    count -= n;
}

template <typename T>
bool decodeList(const QCborValue &v, QList<T> *out)
{
    if (v.isUndefined())
        return true;
    if (!v.isArray())
        return false;
    for (const QCborValue &x : v.toArray()) {
        if (!x.isMap())
            return false;
        T item;
        if (!decode(x.toMap(), &item))
            return false;
        out->append(item);
    }
    return true;
}

} // namespace

void TelemetryBatch::clear()
{
    seq = 0;
    rounds.clear();
    evals.clear();
    merges.clear();
    data.clear();
}

QCborMap toCbor(const TelemetryBatch &batch)
{
    QCborMap map{{"rounds", encodeList(batch.rounds)},
                 {"evals", encodeList(batch.evals)},
                 {"merges", encodeList(batch.merges)}};
    if (!batch.data.isEmpty())
        map.insert(QStringLiteral("data"), encodeList(batch.data));
    if (batch.seq > 0)
        map.insert(QStringLiteral("seq"), batch.seq);
    return map;
}

QList<TelemetryBatch> split(const TelemetryBatch &batch, qsizetype maxBytes)
{
    QList<TelemetryBatch> out;
    qsizetype used = 0;
    splitList(batch.rounds, &TelemetryBatch::rounds, maxBytes, out, used);
    splitList(batch.evals, &TelemetryBatch::evals, maxBytes, out, used);
    splitList(batch.merges, &TelemetryBatch::merges, maxBytes, out, used);
    splitList(batch.data, &TelemetryBatch::data, maxBytes, out, used);
    return out;
}

void dropOldest(TelemetryBatch &batch, qsizetype count)
{
    dropFront(batch.rounds, count);
    dropFront(batch.evals, count);
    dropFront(batch.merges, count);
    dropFront(batch.data, count);
}

bool fromCbor(const QCborMap &map, TelemetryBatch *out)
{
    const QCborValue seq = map.value("seq");
    if (!seq.isUndefined() && !seq.isInteger())
        return false;
    out->seq = seq.toInteger(0);
    return decodeList(map.value("rounds"), &out->rounds) && decodeList(map.value("evals"), &out->evals)
        && decodeList(map.value("merges"), &out->merges) && decodeList(map.value("data"), &out->data);
}

void markPrimaryEvals(QList<EvalRecord> &evals)
{
    QHash<qint64, int> lowest;
    for (const auto &e : std::as_const(evals))
        lowest[e.round] = lowest.contains(e.round) ? std::min(lowest[e.round], e.worker) : e.worker;
    for (auto &e : evals)
        e.primary = e.worker == lowest.value(e.round);
}

QJsonObject toJson(const RoundRecord &r)
{
    return QJsonObject{{"worker", r.worker}, {"round", r.round}, {"t", r.t}, {"batch", r.batch},
                       {"share", r.share}, {"rate", r.rate}, {"compute_s", r.computeS},
                       {"comm_s", r.commS}, {"loss", r.loss}, {"slowdown", r.slowdown},
                       {"bytes_sent", r.bytesSent},
                       {"param_digest", QString::number(r.paramDigest, 16)}, {"link_bytes", toJsonArray(r.linkBytes)}, {"link_mbps", toJsonArray(r.linkMbps)},
                       {"link_fraction", toJsonArray(r.linkFraction)}};
}

QJsonObject toJson(const EvalRecord &e)
{
    return QJsonObject{{"worker", e.worker}, {"round", e.round}, {"t", e.t}, {"accuracy", e.accuracy},
                       {"loss", e.loss}, {"global_accuracy", e.globalAccuracy},
                       {"global_loss", e.globalLoss}, {"min_accuracy", e.minAccuracy}, {"max_accuracy", e.maxAccuracy},
                       {"consensus_accuracy", e.consensusAccuracy}, {"samples", e.samples}, {"final", e.final},
                       {"primary", e.primary}};
}

QJsonObject toJson(const MergeEvent &m)
{
    return QJsonObject{{"round", m.round}, {"t", m.t}, {"from", m.from}, {"to", m.to},
                       {"score_before", m.scoreBefore}, {"score_from", m.scoreFrom},
                       {"alpha", m.alpha}, {"manual", m.manual}};
}

QJsonObject toJson(const DataSummary &d)
{
    QJsonArray histogram;
    for (const qint64 n : d.histogram)
        histogram.append(n);
    return QJsonObject{{"worker", d.worker}, {"dataset", d.dataset}, {"data_dir", d.dataDir}, {"samples", d.samples},
                       {"test_samples", d.testSamples}, {"histogram", histogram}};
}

std::optional<DataSummary> dataSummaryFromJson(const QJsonObject &json)
{
    DataSummary d;
    d.worker = json.value("worker").toInt(-1);
    d.dataset = json.value("dataset").toString();
    d.dataDir = json.value("data_dir").toString();
    d.samples = json.value("samples").toInteger();
    d.testSamples = json.value("test_samples").toInteger();
    for (const QJsonValue &n : json.value("histogram").toArray())
        d.histogram.append(n.toInteger());
    if (d.worker < 0)
        return std::nullopt;
    return d;
}

} // namespace dlion::protocol
