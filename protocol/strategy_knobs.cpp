#include "strategy_knobs.h"

#include <QTextStream>

#include <algorithm>
#include <cmath>

namespace dlion::protocol {

namespace {

Knob integer(const char *name, QJsonValue def, double lo, double hi, const char *label, const char *help,
             const char *unit = "")
{
    Knob k;
    k.name = QLatin1String(name);
    k.type = Knob::Type::Integer;
    k.defaultValue = def;
    k.lo = lo;
    k.hi = hi;
    k.label = QString::fromUtf8(label);
    k.help = QString::fromUtf8(help);
    k.unit = QString::fromUtf8(unit);
    return k;
}

Knob number(const char *name, double def, double lo, double hi, const char *label, const char *help, const char *unit = "")
{
    Knob k = integer(name, def, lo, hi, label, help, unit);
    k.type = Knob::Type::Number;
    return k;
}

Knob flag(const char *name, bool def, const char *label, const char *help)
{
    Knob k = integer(name, def, 0, 0, label, help);
    k.type = Knob::Type::Flag;
    return k;
}

Knob needing(Knob k, const char *flagName)
{
    k.needs = QLatin1String(flagName);
    return k;
}

// Every strategy accepts it: the worker's bound on any collective or wait.
Knob timeoutKnob()
{
    return number("timeout_s", 60, 1, 86400, "Peer &timeout:",
                  "Longest wait on a silent peer or collective before the run fails with a message", " s");
}

QList<Knob> allreduceKnobs()
{
    return {number("bucket_mb", 25, 0, 1024, "&Bucket size:",
                   "Gradient all-reduce buckets, as DDP's bucket_cap_mb: each but the last is all-reduced while "
                   "backward still runs (the first holds at most 1 MB); 0 all-reduces the whole gradient after "
                   "backward",
                   " MB")};
}

// Shown in percent. 10 %: it leaves the schedule of the wan-hetero
// Dirichlet runs, where DKT gains most, as the period alone set it, and cut
// DKT's cost on a fast straggler pair from up to a fifth of the time to
// 6-7% (docs/benchmarks.md).
Knob dktShareKnob()
{
    Knob share = number("dkt_share", 0.1, 0.01, 1, "DKT time &share:",
                        "Longest share of the training time knowledge transfers may take; they run less often than "
                        "every period where they would take more",
                        " %");
    share.scale = 100;
    return needing(share, "dkt");
}

Knob roundBudgetKnob()
{
    Knob budget = number("round_budget_s", 0, 0, 3600, "&Round budget:",
                         "Seconds a round's payloads may take on a link (0, auto: the slowest worker's compute time, "
                         "or half the round's measured time beyond its transfer where that is longer)",
                         " s");
    budget.lowestText = QStringLiteral("auto");
    return budget;
}

QList<Knob> dlionKnobs()
{
    return {flag("wdb", true, "Weighted dynamic batching", "Each worker's batch share follows its measured compute rate"),
            flag("prioritized", true, "Per-link prioritized gradient exchange",
                 "Send only the largest gradient entries a link can carry in a round"),
            flag("dkt", true, "Direct knowledge transfer", "Periodically merge the best worker's parameters into the others"),
            flag("pipeline", true, "Pipelined rounds on fast links",
                 "Run one round stale while the links take less time than the compute, so the exchange overlaps the "
                 "next round (only at staleness 0)"),
            needing(integer("dkt_period", 50, 1, 1e9, "DKT &period:", "Fewest rounds between knowledge transfers", " rounds"), "dkt"),
            dktShareKnob(),
            needing(number("dkt_alpha", 1, 0, 1, "DKT &weight:", "Merge weight: w ← (1−α)·w + α·w_best (1: take the best replica's)"), "dkt"),
            needing(number("dkt_margin", 0, 0, 10, "DKT &margin:",
                           "Standard errors (on the held-out batch) a replica must trail the best by to merge; "
                           "0: any replica behind the best merges",
                           " std. errors"),
                    "dkt"),
            needing(integer("heldout_samples", 500, 10, 1e6, "&Held-out samples:",
                            "Samples of the shared held-out batch replicas are scored on for knowledge transfer"),
                    "dkt"),
            // Default 0, as in the paper: 1 helps skewed data and fast links but
            // costs iid on WAN links (engine/dlion_strategy.h); 2 and 4 let
            // replicas drift apart (docs/benchmarks.md).
            integer("staleness", 0, 0, 64, "&Staleness bound:",
                    "Rounds a worker may run ahead of the payloads it steps with (0: fully synchronous; more hides WAN latency)",
                    " rounds"),
            integer("max_growth", 2, 1, 32, "Batch &growth:",
                    "Most the global batch may grow while rounds wait on the links, the learning rate with its "
                    "square root (1: the paper's fixed batch)",
                    "x"),
            needing(integer("min_share", QJsonValue::Null, 1, 65536, "M&in share:",
                            "Smallest batch share of a worker (default: batch_size / 8, at least 1)", " samples"),
                    "wdb"),
            needing(integer("max_share", QJsonValue::Null, 1, 1 << 20, "M&ax share:",
                            "Largest batch share of a worker, at least min_share (default: 4 × batch_size, at least min_share)", " samples"),
                    "wdb"),
            roundBudgetKnob()};
}

QList<Knob> gaiaKnobs()
{
    Knob threshold = number("threshold", 0.01, 0, 10, "Significance &threshold:",
                            "Share an update only where |Δw| / |w| exceeds this (Gaia used 1 %)", " %");
    threshold.scale = 100;
    return {threshold};
}

QList<Knob> akoKnobs()
{
    Knob partitions = integer("partitions", 0, 0, 4096, "&Partitions:",
                              "Gradient partitions p; one partition is sent per round (0: from measured bandwidth)");
    partitions.lowestText = QStringLiteral("auto (from bandwidth)");
    return {partitions};
}

QList<Knob> hopKnobs()
{
    Knob topology;
    topology.name = QStringLiteral("topology");
    topology.type = Knob::Type::Choice;
    topology.defaultValue = QStringLiteral("ring");
    topology.choices = {{QStringLiteral("ring"), QStringLiteral("Ring (two neighbours)")},
                        {QStringLiteral("all"), QStringLiteral("All (every other worker)")}};
    topology.label = QStringLiteral("&Topology:");
    topology.help = QStringLiteral("Whose models each worker averages with");
    return {integer("staleness", 4, 0, 1000, "&Staleness bound:",
                    "A worker may run at most this many rounds ahead of its slowest neighbour", " rounds"),
            integer("backup", 0, 0, 64, "&Backup workers:",
                    "Backup workers: proceed once n − b neighbours are within the staleness bound", " workers"),
            flag("skip", false, "Iteration skipping", "A worker behind all its neighbours jumps to their iteration"),
            topology};
}

StrategyInfo strategy(const char *name, const char *title, QList<Knob> knobs)
{
    knobs.append(timeoutKnob());
    return {QLatin1String(name), QString::fromUtf8(title), knobs};
}

QString choiceValues(const Knob &k)
{
    QStringList values;
    for (const KnobChoice &c : k.choices)
        values.append(c.value);
    return values.join(QLatin1String(", "));
}

// Null when `v` is a value the knob allows.
QString checkValue(const Knob &k, const QJsonValue &v)
{
    const QString bad = QStringLiteral("field \"strategy_options.%1\" must be %2").arg(k.name, k.rangeText());
    switch (k.type) {
    case Knob::Type::Flag:
        return v.isBool() ? QString() : bad;
    case Knob::Type::Choice:
        return v.isString()
                && std::any_of(k.choices.begin(), k.choices.end(), [&](const KnobChoice &c) { return c.value == v.toString(); })
            ? QString()
            : bad;
    case Knob::Type::Integer:
    case Knob::Type::Number:
        break;
    }
    const double d = v.toDouble(std::nan(""));
    const bool whole = k.type == Knob::Type::Number || d == std::floor(d);
    return v.isDouble() && std::isfinite(d) && d >= k.lo && d <= k.hi && whole ? QString() : bad;
}

} // namespace

QString Knob::rangeText() const
{
    switch (type) {
    case Type::Flag:
        return QStringLiteral("true or false");
    case Type::Choice:
        return QStringLiteral("one of: %1").arg(choiceValues(*this));
    case Type::Integer:
        return QStringLiteral("a whole number from %1 to %2").arg(lo, 0, 'g', 10).arg(hi, 0, 'g', 10);
    case Type::Number:
        break;
    }
    return QStringLiteral("a number from %1 to %2").arg(lo, 0, 'g', 10).arg(hi, 0, 'g', 10);
}

const QList<StrategyInfo> &strategies()
{
    static const QList<StrategyInfo> all = {
        strategy("allreduce", "All-reduce (BSP, like PyTorch DDP)", allreduceKnobs()),
        strategy("dlion", "DLion (WDB + prioritized exchange + DKT)", dlionKnobs()),
        strategy("gaia", "Gaia (significance filter)", gaiaKnobs()),
        strategy("ako", "Ako (partial gradient partitions)", akoKnobs()),
        strategy("hop", "Hop (decentralized, backup workers)", hopKnobs()),
    };
    return all;
}

QStringList strategyNames()
{
    QStringList names;
    for (const StrategyInfo &s : strategies())
        names.append(s.name);
    return names;
}

const StrategyInfo *findStrategy(const QString &name)
{
    for (const StrategyInfo &s : strategies()) {
        if (s.name == name)
            return &s;
    }
    return nullptr;
}

const Knob *findKnob(const QString &strategy, const QString &knob)
{
    const StrategyInfo *s = findStrategy(strategy);
    if (!s)
        return nullptr;
    for (const Knob &k : s->knobs) {
        if (k.name == knob)
            return &k;
    }
    return nullptr;
}

QString checkKnobs(const QString &strategy, const QJsonObject &options)
{
    const StrategyInfo *s = findStrategy(strategy);
    if (!s)
        return QStringLiteral("unknown strategy \"%1\" (use %2)").arg(strategy, strategyNames().join(QLatin1String(", ")));
    for (auto it = options.begin(); it != options.end(); ++it) {
        const Knob *k = findKnob(strategy, it.key());
        if (!k) {
            QStringList known;
            for (const Knob &each : s->knobs)
                known.append(each.name);
            return QStringLiteral("unknown knob \"strategy_options.%1\" for strategy %2 (known: %3)")
                .arg(it.key(), strategy, known.join(QLatin1String(", ")));
        }
        if (QString why = checkValue(*k, it.value()); !why.isNull())
            return why;
    }
    return {};
}

QJsonValue knobValue(const QString &strategy, const QJsonObject &options, const QString &knob)
{
    const Knob *k = findKnob(strategy, knob);
    Q_ASSERT_X(k, "knobValue", "a knob outside the strategy's schema");
    return options.contains(knob) || !k ? options.value(knob) : k->defaultValue;
}

QString knobsHelp()
{
    QString text;
    QTextStream out(&text);
    for (const StrategyInfo &s : strategies()) {
        out << s.name << ": " << s.title << "\n";
        for (const Knob &k : s.knobs) {
            const QString def = k.derivedDefault() ? QStringLiteral("see text") : k.defaultValue.toVariant().toString();
            out << "  " << k.name << "  " << k.rangeText() << ", default " << def << "\n      " << k.help;
            if (!k.needs.isEmpty())
                out << " (only with " << k.needs << ")";
            out << "\n";
        }
    }
    return text;
}

} // namespace dlion::protocol
