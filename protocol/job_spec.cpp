#include "job_spec.h"

#include "strategy_knobs.h"

#include <QJsonArray>
#include <QRegularExpression>
#include <QSet>
#include <QStringList>

#include <algorithm>
#include <cmath>

namespace dlion::protocol {

namespace {

const QStringList kModels = {"lenet5", "mlp", "cnn"};
const QStringList kDatasets = {"fashion-mnist", "mnist", "synthetic", "cifar10", "shapes", "imagefolder", "csv", "npy"};
const QStringList kTestSets = {"local", "shared"};
const QStringList kDevices = {"cpu", "cuda"};

// Reads typed fields out of a JSON object, remembering the first error.
class Reader {
public:
    Reader(const QJsonObject &o, QString prefix) : m_o(o), m_prefix(std::move(prefix)) {}

    void str(const char *key, QString &out, const QStringList &allowed = {})
    {
        const QJsonValue v = m_o.value(QLatin1String(key));
        if (v.isUndefined())
            return;
        if (!v.isString())
            return fail(key, QStringLiteral("must be a string"));
        if (!allowed.isEmpty() && !allowed.contains(v.toString()))
            return fail(key, QStringLiteral("is \"%1\"; allowed: %2").arg(v.toString(), allowed.join(", ")));
        out = v.toString();
    }

    template <typename T>
    void num(const char *key, T &out, double lo, double hi)
    {
        const QJsonValue v = m_o.value(QLatin1String(key));
        if (v.isUndefined())
            return;
        if (!v.isDouble())
            return fail(key, QStringLiteral("must be a number"));
        const double d = v.toDouble();
        if (!std::isfinite(d) || d < lo || d > hi)
            return fail(key, QStringLiteral("is %1; must be between %2 and %3").arg(d).arg(lo).arg(hi));
        if constexpr (std::is_integral_v<T>) {
            if (d != std::floor(d))
                return fail(key, QStringLiteral("must be a whole number"));
        }
        out = T(d);
    }

    void boolean(const char *key, bool &out)
    {
        const QJsonValue v = m_o.value(QLatin1String(key));
        if (v.isUndefined())
            return;
        if (!v.isBool())
            return fail(key, QStringLiteral("must be true or false"));
        out = v.toBool();
    }

    void object(const char *key, QJsonObject &out)
    {
        const QJsonValue v = m_o.value(QLatin1String(key));
        if (v.isUndefined())
            return;
        if (!v.isObject())
            return fail(key, QStringLiteral("must be an object"));
        out = v.toObject();
    }

    void strings(const char *key, QStringList &out)
    {
        const QJsonValue v = m_o.value(QLatin1String(key));
        if (v.isUndefined())
            return;
        for (const QJsonValue &e : v.toArray()) {
            if (!e.isString() || e.toString().isEmpty())
                return fail(key, QStringLiteral("must be a list of non-empty strings"));
            out.append(e.toString());
        }
        if (!v.isArray())
            fail(key, QStringLiteral("must be a list of non-empty strings"));
    }

    void fail(const char *key, const QString &why)
    {
        if (m_error.isEmpty())
            m_error = QStringLiteral("field \"%1%2\" %3").arg(m_prefix, QLatin1String(key), why);
    }
    void failRaw(const QString &message)
    {
        if (m_error.isEmpty())
            m_error = message;
    }
    const QString &error() const { return m_error; }

private:
    QJsonObject m_o;
    QString m_prefix;
    QString m_error;
};

bool parseDirichlet(const QString &partition, double *alpha)
{
    if (partition == QLatin1String("iid")) {
        *alpha = 0;
        return true;
    }
    if (!partition.startsWith(QLatin1String("dirichlet:")))
        return false;
    bool ok = false;
    const double a = partition.mid(10).toDouble(&ok);
    if (!ok || !(a > 0) || !std::isfinite(a))
        return false;
    *alpha = a;
    return true;
}

// "worker_data": a list of {dataset, data_dir}, one per worker.
void readWorkerData(const QJsonObject &json, Reader &r, QList<WorkerData> &out)
{
    const QJsonValue v = json.value("worker_data");
    if (v.isUndefined())
        return;
    const QString shape = QStringLiteral("must be a list with one {dataset, data_dir} entry per worker");
    if (!v.isArray() || v.toArray().isEmpty())
        return r.fail("worker_data", shape);
    const QJsonArray list = v.toArray();
    for (qsizetype i = 0; i < list.size(); ++i) {
        const QJsonObject o = list[i].toObject();
        Reader wr(o, QStringLiteral("worker_data[%1].").arg(i));
        if (!list[i].isObject())
            wr.failRaw(QStringLiteral("field \"worker_data\" %1").arg(shape));
        for (auto it = o.begin(); it != o.end(); ++it) {
            if (it.key() != QLatin1String("dataset") && it.key() != QLatin1String("data_dir"))
                wr.failRaw(QStringLiteral("unknown field \"worker_data[%1].%2\" (allowed: dataset, data_dir)").arg(i).arg(it.key()));
        }
        WorkerData w;
        wr.str("dataset", w.dataset, kDatasets);
        wr.str("data_dir", w.dataDir);
        if (!wr.error().isEmpty())
            return r.failRaw(wr.error());
        out.append(w);
    }
}

} // namespace

const QStringList &datasetNames()
{
    return kDatasets;
}

QJsonArray workerDataJson(const QList<WorkerData> &list)
{
    QJsonArray out;
    for (const WorkerData &w : list) {
        QJsonObject o;
        if (!w.dataset.isEmpty())
            o.insert("dataset", w.dataset);
        if (!w.dataDir.isEmpty())
            o.insert("data_dir", w.dataDir);
        out.append(o);
    }
    return out;
}

QJsonObject GroupPlan::toJson() const
{
    QJsonArray m;
    for (int w : members)
        m.append(w);
    QJsonObject o{{"generation", generation}, {"members", m}, {"source", source}};
    if (!rendezvousHost.isEmpty())
        o.insert("rendezvous_host", rendezvousHost);
    if (rendezvousPort > 0)
        o.insert("rendezvous_port", rendezvousPort);
    return o;
}

std::optional<GroupPlan> GroupPlan::fromJson(const QJsonObject &json, int world, QString *error)
{
    GroupPlan g;
    Reader r(json, QStringLiteral("group."));
    for (auto it = json.begin(); it != json.end(); ++it) {
        if (!QStringList{"generation", "members", "source", "rendezvous_host", "rendezvous_port"}.contains(it.key()))
            r.failRaw(QStringLiteral("unknown field \"group.%1\"").arg(it.key()));
    }
    r.num("generation", g.generation, 0, 1e6);
    r.num("source", g.source, 0, 4095);
    r.str("rendezvous_host", g.rendezvousHost);
    r.num("rendezvous_port", g.rendezvousPort, 0, 65535);
    const QJsonValue members = json.value("members");
    const QString shape = QStringLiteral("must be a non-empty list of distinct worker ids below %1").arg(world);
    if (!members.isArray() || members.toArray().isEmpty())
        r.fail("members", shape);
    for (const QJsonValue &v : members.toArray()) {
        const int w = v.toInt(-1);
        if (!v.isDouble() || v.toDouble() != w || w < 0 || w >= world || g.members.contains(w)) {
            r.fail("members", shape);
            break;
        }
        g.members.append(w);
    }
    if (r.error().isEmpty() && !g.members.contains(g.source))
        r.fail("source", QStringLiteral("is %1, which is not a member").arg(g.source));
    if (!r.error().isEmpty()) {
        if (error)
            *error = r.error();
        return std::nullopt;
    }
    return g;
}

GroupPlan JobSpec::initialGroup() const
{
    GroupPlan g = group;
    if (g.members.isEmpty()) {
        for (int w = 0; w < world; ++w)
            g.members.append(w);
    }
    g.rendezvousHost = rendezvousHost;
    g.rendezvousPort = rendezvousPort;
    return g;
}

double LrSchedule::factor(qint64 round) const
{
    const double warm = warmupRounds > 0 ? std::min(1.0, double(round + 1) / double(warmupRounds)) : 1.0;
    return decayEvery > 0 ? warm * std::pow(gamma, double(round / decayEvery)) : warm;
}

std::optional<LrSchedule> LrSchedule::parse(const QString &text)
{
    LrSchedule s;
    if (text == QLatin1String("constant"))
        return s;
    bool warmup = false, step = false;
    for (const QString &part : text.split('+')) {
        const QStringList f = part.split(':');
        bool ok1 = false, ok2 = true;
        const qint64 rounds = f.value(1).toLongLong(&ok1);
        if (!ok1 || rounds <= 0)
            return std::nullopt;
        if (f.size() == 2 && f[0] == QLatin1String("warmup") && !warmup) {
            warmup = true;
            s.warmupRounds = rounds;
        } else if (f.size() == 3 && f[0] == QLatin1String("step") && !step) {
            step = true;
            s.decayEvery = rounds;
            s.gamma = f[2].toDouble(&ok2);
            if (!ok2 || !(s.gamma > 0 && s.gamma <= 1))
                return std::nullopt;
        } else {
            return std::nullopt;
        }
    }
    return s;
}

double JobSpec::dirichletAlpha() const
{
    double a = 0;
    parseDirichlet(partition, &a);
    return a;
}

WorkerData JobSpec::dataFor(int worker) const
{
    WorkerData w = worker >= 0 && worker < workerData.size() ? workerData[worker] : WorkerData{};
    if (w.dataset.isEmpty())
        w.dataset = dataset;
    if (w.dataDir.isEmpty() && w.dataset == dataset)
        w.dataDir = dataDir;
    return w;
}

double JobSpec::slowdownFor(int worker) const
{
    return worker >= 0 && worker < slowdown.size() ? slowdown[worker] : 1.0;
}

QJsonObject JobSpec::toJson() const
{
    QJsonArray slow;
    for (double f : slowdown)
        slow.append(f);
    QJsonObject out{
        {"strategy", strategy},
        {"model", model},
        {"dataset", dataset},
        {"data_dir", dataDir},
        {"partition", partition},
        {"batch_size", batchSize},
        {"lr", lr},
        {"momentum", momentum},
        {"weight_decay", weightDecay},
        {"lr_schedule", lrSchedule},
        {"seed", double(seed)},
        {"budget", QJsonObject{{"seconds", budget.seconds},
                               {"epochs", budget.epochs},
                               {"target_accuracy", budget.targetAccuracy},
                               {"max_rounds", double(budget.maxRounds)}}},
        {"eval_interval_s", evalIntervalS},
        {"eval_samples", evalSamples},
        {"threads", threads},
        {"device", device},
        {"verify_replicas", verifyReplicas},
        {"slowdown", slow},
        {"strategy_options", strategyOptions},
        {"emulation", emulation},
        {"rank", rank},
        {"world", world},
        {"rendezvous_host", rendezvousHost},
        {"rendezvous_port", rendezvousPort},
    };
    if (!group.members.isEmpty())
        out.insert("group", group.toJson());
    if (checkpoint.enabled())
        out.insert("checkpoint", QJsonObject{{"dir", checkpoint.dir}, {"interval_s", checkpoint.intervalS}, {"keep", checkpoint.keep}});
    if (!resumeFrom.isEmpty())
        out.insert("resume_from", resumeFrom);
    if (!modelSha256.isEmpty())
        out.insert("model_sha256", modelSha256);
    if (!workerData.isEmpty()) {
        out.insert("worker_data", workerDataJson(workerData));
        out.insert("test_set", testSet);
    }
    if (!classNames.isEmpty())
        out.insert("class_names", QJsonArray::fromStringList(classNames));
    return out;
}

namespace {

void readUnknownFields(const QJsonObject &json, Reader &r)
{
    static const QSet<QString> known = {
        "strategy", "model", "dataset", "data_dir", "partition", "batch_size", "lr", "momentum",
        "weight_decay", "lr_schedule", "seed", "budget", "eval_interval_s", "eval_samples", "threads",
        "device", "verify_replicas", "slowdown", "strategy_options", "emulation", "rank", "world", "rendezvous_host",
        "rendezvous_port", "workers", "group", "checkpoint", "resume_from", "worker_data", "test_set", "class_names",
        "model_sha256"};
    for (auto it = json.begin(); it != json.end(); ++it) {
        if (!known.contains(it.key()))
            r.failRaw(QStringLiteral("unknown field \"%1\" in the job (check its spelling)").arg(it.key()));
    }
}

// What is trained and how: every top-level field but placement and the
// nested objects.
void readTraining(Reader &r, JobSpec &s)
{
    r.str("strategy", s.strategy, strategyNames());
    r.str("model", s.model);
    if (!kModels.contains(s.model) && !s.model.endsWith(QLatin1String(".pt")))
        r.fail("model", QStringLiteral("is \"%1\"; allowed: %2, or a TorchScript file PATH.pt").arg(s.model, kModels.join(", ")));
    r.str("model_sha256", s.modelSha256);
    static const QRegularExpression kSha256(QStringLiteral("^[0-9a-f]{64}$"));
    if (!s.modelSha256.isEmpty() && !kSha256.match(s.modelSha256).hasMatch())
        r.fail("model_sha256", QStringLiteral("is \"%1\"; give the model file's SHA-256 as 64 lowercase hex digits (sha256sum prints it)").arg(s.modelSha256));
    else if (!s.modelSha256.isEmpty() && !s.model.endsWith(QLatin1String(".pt")))
        r.fail("model_sha256", QStringLiteral("is set, but model \"%1\" is not a TorchScript file PATH.pt").arg(s.model));
    r.str("dataset", s.dataset, kDatasets);
    r.str("data_dir", s.dataDir);
    r.str("partition", s.partition);
    if (double a = 0; !parseDirichlet(s.partition, &a))
        r.fail("partition", QStringLiteral("is \"%1\"; use \"iid\" or \"dirichlet:ALPHA\" with ALPHA > 0").arg(s.partition));
    r.num("batch_size", s.batchSize, 1, 65536);
    r.num("lr", s.lr, 1e-9, 100);
    r.num("momentum", s.momentum, 0, 0.999999);
    r.num("weight_decay", s.weightDecay, 0, 1);
    r.str("lr_schedule", s.lrSchedule);
    if (!LrSchedule::parse(s.lrSchedule))
        r.fail("lr_schedule", QStringLiteral("is \"%1\"; use \"constant\", \"warmup:ROUNDS\", \"step:ROUNDS:GAMMA\" "
                                             "(0 < GAMMA <= 1), or both as \"warmup:ROUNDS+step:ROUNDS:GAMMA\"")
                                  .arg(s.lrSchedule));
    r.num("seed", s.seed, 0, 9007199254740991.0);
    r.num("eval_interval_s", s.evalIntervalS, 0.05, 86400);
    r.num("eval_samples", s.evalSamples, 1, 1e7);
    r.num("threads", s.threads, 1, 256);
    r.str("device", s.device, kDevices);
    r.boolean("verify_replicas", s.verifyReplicas);
    r.object("strategy_options", s.strategyOptions);
    if (r.error().isEmpty())
        r.failRaw(checkKnobs(s.strategy, s.strategyOptions));
    r.object("emulation", s.emulation);
    r.str("resume_from", s.resumeFrom);
}

void readPlacement(Reader &r, JobSpec &s)
{
    r.num("rank", s.rank, 0, 4095);
    r.num("world", s.world, 1, 4096);
    r.str("rendezvous_host", s.rendezvousHost);
    r.num("rendezvous_port", s.rendezvousPort, 0, 65535);
    if (s.rank >= s.world)
        r.fail("rank", QStringLiteral("is %1 but world is %2").arg(s.rank).arg(s.world));
}

// Data each worker holds itself: worker_data (one entry per worker), whose
// test split scores it, and the label names.
void readOwnData(const QJsonObject &json, Reader &r, JobSpec &s)
{
    readWorkerData(json, r, s.workerData);
    r.str("test_set", s.testSet, kTestSets);
    r.strings("class_names", s.classNames);
    if (s.classNames.size() > 256 || s.classNames.size() != QSet<QString>(s.classNames.begin(), s.classNames.end()).size())
        r.fail("class_names", QStringLiteral("must list at most 256 distinct names"));
    if (!s.workerData.isEmpty() && json.contains("world") && s.workerData.size() != s.world)
        r.fail("worker_data", QStringLiteral("lists %1 entries for %2 workers; give one per worker").arg(s.workerData.size()).arg(s.world));
}

void readCheckpoint(const QJsonObject &json, Reader &r, CheckpointSpec &out)
{
    const QJsonValue ck = json.value("checkpoint");
    if (ck.isUndefined())
        return;
    if (!ck.isObject())
        r.fail("checkpoint", QStringLiteral("must be an object with dir, interval_s and keep"));
    const QJsonObject c = ck.toObject();
    Reader cr(c, QStringLiteral("checkpoint."));
    for (auto it = c.begin(); it != c.end(); ++it) {
        if (!QStringList{"dir", "interval_s", "keep"}.contains(it.key()))
            cr.failRaw(QStringLiteral("unknown field \"checkpoint.%1\" (allowed: dir, interval_s, keep)").arg(it.key()));
    }
    cr.str("dir", out.dir);
    cr.num("interval_s", out.intervalS, 0.1, 1e7);
    cr.num("keep", out.keep, 1, 1000);
    if (ck.isObject() && out.dir.isEmpty())
        cr.fail("dir", QStringLiteral("must name the directory checkpoints are written to"));
    r.failRaw(cr.error());
}

void readBudget(const QJsonObject &json, Reader &r, Budget &out)
{
    const QJsonValue budget = json.value("budget");
    if (!budget.isUndefined() && !budget.isObject())
        r.fail("budget", QStringLiteral("must be an object with seconds, epochs, target_accuracy or max_rounds"));
    const QJsonObject b = budget.toObject();
    Reader br(b, QStringLiteral("budget."));
    for (auto it = b.begin(); it != b.end(); ++it) {
        if (!QStringList{"seconds", "epochs", "target_accuracy", "max_rounds"}.contains(it.key()))
            br.failRaw(QStringLiteral("unknown field \"budget.%1\" (allowed: seconds, epochs, target_accuracy, max_rounds)").arg(it.key()));
    }
    br.num("seconds", out.seconds, 0, 1e7);
    br.num("epochs", out.epochs, 0, 1e6);
    br.num("target_accuracy", out.targetAccuracy, 0, 1);
    br.num("max_rounds", out.maxRounds, 0, 1e12);
    r.failRaw(br.error());
    if (out.seconds <= 0 && out.epochs <= 0 && out.targetAccuracy <= 0 && out.maxRounds <= 0)
        r.failRaw(QStringLiteral("field \"budget\" sets no limit: give seconds, epochs, target_accuracy or max_rounds"));
}

void readSlowdown(const QJsonObject &json, Reader &r, QList<double> &out)
{
    const QJsonValue slow = json.value("slowdown");
    if (slow.isUndefined())
        return;
    const QJsonArray factors = slow.toArray();
    const bool valid = slow.isArray() && std::all_of(factors.begin(), factors.end(), [](const QJsonValue &v) {
        return v.isDouble() && v.toDouble() >= 1 && std::isfinite(v.toDouble());
    });
    if (!valid)
        return r.fail("slowdown", QStringLiteral("must be a list of factors >= 1, one per worker"));
    for (const QJsonValue &v : factors)
        out.append(v.toDouble());
}

// Only once everything else is valid: the plan is checked against world and rank.
void readGroup(const QJsonObject &json, Reader &r, JobSpec &s)
{
    const QJsonValue g = json.value("group");
    if (g.isUndefined() || !r.error().isEmpty())
        return;
    QString why;
    if (!g.isObject())
        r.fail("group", QStringLiteral("must be an object with generation, members and source"));
    else if (const auto plan = GroupPlan::fromJson(g.toObject(), s.world, &why))
        s.group = *plan;
    else
        r.failRaw(why);
    if (r.error().isEmpty() && !s.group.members.contains(s.rank))
        r.fail("group", QStringLiteral("does not list this worker (%1) as a member").arg(s.rank));
}

} // namespace

std::optional<JobSpec> JobSpec::fromJson(const QJsonObject &json, QString *error)
{
    JobSpec s;
    Reader r(json, QString());
    readUnknownFields(json, r);
    readTraining(r, s);
    readPlacement(r, s);
    readOwnData(json, r, s);
    readCheckpoint(json, r, s.checkpoint);
    readBudget(json, r, s.budget);
    readSlowdown(json, r, s.slowdown);
    readGroup(json, r, s);
    if (!r.error().isEmpty()) {
        if (error)
            *error = r.error();
        return std::nullopt;
    }
    return s;
}

} // namespace dlion::protocol
