#include "cluster_spec.h"

#include "structured_file.h"

#include <job_spec.h>

#include <QDir>
#include <QHostAddress>
#include <QJsonArray>
#include <QRegularExpression>
#include <QSet>

#include <algorithm>
#include <cmath>

namespace dlion::core {

namespace {

const QStringList kTopKeys = {"name", "known_hosts", "connect_timeout_s", "rendezvous_port", "agent_port", "hosts"};
const QStringList kHostKeys = {"name", "address", "port", "user", "auth", "key_file", "work_dir",
                               "listen", "agent_port", "agent_path", "slowdown", "link_mbps", "password",
                               "data_dir", "dataset"};

// The engine's link matrix has no "uncapped" entry: links between hosts
// without link_mbps get a cap no network here reaches.
constexpr double kUncappedMbps = 100000;

QString expandHome(const QString &path)
{
    return path.startsWith(QLatin1String("~/")) ? QDir::homePath() + path.mid(1) : path;
}

// A numeric IP address, with at most an interface name as IPv6 scope
// (QHostAddress takes any text after '%'; the address goes into a remote
// command line).
bool isPlainAddress(const QString &text)
{
    static const QRegularExpression kPlain(QStringLiteral("^[0-9A-Fa-f.:]+(%[A-Za-z0-9_.-]+)?$"));
    return kPlain.match(text).hasMatch() && !QHostAddress(text).isNull();
}

// Typed access to one JSON object; the first error wins and names `where`.
class Fields {
public:
    Fields(const QJsonObject &o, QString where) : m_o(o), m_where(std::move(where)) {}

    bool has(const char *key) const { return m_o.contains(QLatin1String(key)); }

    QString text(const char *key, bool required = false)
    {
        const QJsonValue v = m_o.value(QLatin1String(key));
        if (v.isUndefined()) {
            if (required)
                fail(key, QStringLiteral("is missing"));
            return {};
        }
        if (!v.isString() || v.toString().trimmed().isEmpty())
            fail(key, QStringLiteral("must be a non-empty string"));
        return v.toString().trimmed();
    }

    double number(const char *key, double fallback, double lo, double hi, bool whole)
    {
        const QJsonValue v = m_o.value(QLatin1String(key));
        if (v.isUndefined())
            return fallback;
        const double d = v.toDouble(std::nan(""));
        if (!v.isDouble() || !(d >= lo && d <= hi) || (whole && d != std::floor(d))) {
            fail(key, QStringLiteral("must be a %1 from %2 to %3").arg(whole ? "whole number" : "number").arg(lo).arg(hi));
            return fallback;
        }
        return d;
    }

    void rejectUnknown(const QStringList &known)
    {
        for (const QString &k : m_o.keys())
            if (!known.contains(k))
                fail(qPrintable(k), QStringLiteral("is not a cluster field; known: %1").arg(known.join(", ")));
    }

    void fail(const char *key, const QString &why)
    {
        if (m_error.isEmpty())
            m_error = QStringLiteral("%1field \"%2\" %3").arg(m_where, QLatin1String(key), why);
    }

    QString error() const { return m_error; }

private:
    QJsonObject m_o;
    QString m_where;
    QString m_error;
};

std::optional<ClusterHost> readHost(const QJsonObject &o, int index, int defaultAgentPort, QString *error)
{
    ClusterHost h;
    const QString fallbackName = QStringLiteral("host-%1").arg(index + 1);
    const QString givenName = o.value("name").toString();
    Fields f(o, QStringLiteral("host \"%1\": ").arg(givenName.isEmpty() ? fallbackName : givenName));
    h.name = f.has("name") ? f.text("name") : fallbackName;
    static const QRegularExpression kSafeName(QStringLiteral("^[A-Za-z0-9][A-Za-z0-9._-]*$"));
    if (!h.name.isEmpty() && !kSafeName.match(h.name).hasMatch())
        f.fail("name", QStringLiteral("may use only letters, digits, '.', '_' and '-'"));
    h.address = f.text("address", true);
    h.port = int(f.number("port", 22, 1, 65535, true));
    h.user = f.text("user", true);
    const QString auth = f.has("auth") ? f.text("auth") : QStringLiteral("agent");
    if (auth == QLatin1String("key"))
        h.auth = SshAuth::KeyFile;
    else if (auth == QLatin1String("password"))
        h.auth = SshAuth::Password;
    else if (auth != QLatin1String("agent"))
        f.fail("auth", QStringLiteral("is \"%1\"; allowed: key, agent, password").arg(auth));
    if (f.has("password"))
        f.fail("password", QStringLiteral("is not allowed: passwords are never stored; use auth: password to be asked at run time"));
    h.keyFile = expandHome(f.text("key_file", h.auth == SshAuth::KeyFile));
    h.workDir = f.text("work_dir", true);
    if (!h.workDir.isEmpty() && !h.workDir.startsWith('/') && !h.workDir.startsWith(QLatin1String("~/")))
        f.fail("work_dir", QStringLiteral("must be an absolute path or start with ~/"));
    h.listen = f.text("listen");
    if (!h.listen.isEmpty() && !isPlainAddress(h.listen))
        f.fail("listen", QStringLiteral("must be a numeric IP address of that host, e.g. 10.0.0.5 or fe80::1%eth0 "
                                        "(a scope after '%' may use only letters, digits, '.', '_' and '-')"));
    h.agentPort = int(f.number("agent_port", defaultAgentPort, 0, 65535, true));
    h.agentPath = f.text("agent_path");
    if (!h.agentPath.isEmpty() && !h.agentPath.startsWith('/'))
        f.fail("agent_path", QStringLiteral("must be an absolute path"));
    h.slowdown = f.number("slowdown", 0, 1, 1000, false);
    h.linkMbps = f.number("link_mbps", 0, 0.01, 1e6, false);
    h.dataDir = f.text("data_dir");
    if (!h.dataDir.isEmpty() && !h.dataDir.startsWith('/'))
        f.fail("data_dir", QStringLiteral("must be an absolute path on that host"));
    h.dataset = f.text("dataset");
    if (!h.dataset.isEmpty() && !protocol::datasetNames().contains(h.dataset))
        f.fail("dataset", QStringLiteral("is \"%1\"; allowed: %2").arg(h.dataset, protocol::datasetNames().join(", ")));
    f.rejectUnknown(kHostKeys);
    if (!f.error().isEmpty()) {
        *error = f.error();
        return std::nullopt;
    }
    return h;
}

} // namespace

std::optional<ClusterSpec> ClusterSpec::fromJson(const QJsonObject &json, QString *error)
{
    ClusterSpec spec;
    Fields f(json, QString());
    spec.name = f.has("name") ? f.text("name") : QStringLiteral("cluster");
    spec.knownHosts = expandHome(f.has("known_hosts") ? f.text("known_hosts") : QStringLiteral("~/.ssh/known_hosts"));
    spec.connectTimeoutS = int(f.number("connect_timeout_s", 10, 1, 600, true));
    spec.rendezvousPort = int(f.number("rendezvous_port", 0, 0, 65535, true));
    const int agentPort = int(f.number("agent_port", 0, 0, 65535, true));
    const QJsonValue hosts = json.value("hosts");
    if (!hosts.isArray() || hosts.toArray().isEmpty())
        f.fail("hosts", QStringLiteral("must be a non-empty list of hosts"));
    f.rejectUnknown(kTopKeys);
    if (!f.error().isEmpty()) {
        *error = f.error();
        return std::nullopt;
    }
    QSet<QString> names;
    const QJsonArray list = hosts.toArray();
    for (int i = 0; i < list.size(); ++i) {
        if (!list[i].isObject()) {
            *error = QStringLiteral("field \"hosts\" entry %1 must be a mapping of host fields").arg(i + 1);
            return std::nullopt;
        }
        auto host = readHost(list[i].toObject(), i, agentPort, error);
        if (!host)
            return std::nullopt;
        if (names.contains(host->name)) {
            *error = QStringLiteral("host \"%1\": field \"name\" is used by two hosts; names must be unique").arg(host->name);
            return std::nullopt;
        }
        names.insert(host->name);
        spec.hosts.append(*host);
    }
    return spec;
}

QJsonObject ClusterSpec::jobOverrides() const
{
    QJsonObject out{{"workers", int(hosts.size())}};
    QJsonArray slowdown, links;
    QList<protocol::WorkerData> data;
    bool anySlowdown = false, anyLink = false, anyData = false;
    for (const ClusterHost &a : hosts) {
        anySlowdown |= a.slowdown > 0;
        anyLink |= a.linkMbps > 0;
        anyData |= !a.dataDir.isEmpty() || !a.dataset.isEmpty();
        data.append({a.dataset, a.dataDir});
        slowdown.append(a.slowdown > 0 ? a.slowdown : 1.0);
        QJsonArray row;
        for (const ClusterHost &b : hosts) {
            const double ends[] = {a.linkMbps, b.linkMbps};
            double cap = kUncappedMbps;
            for (double e : ends)
                cap = e > 0 ? std::min(cap, e) : cap;
            row.append(&a == &b ? 0.0 : cap);
        }
        links.append(row);
    }
    if (anySlowdown)
        out.insert("slowdown", slowdown);
    if (anyLink)
        out.insert("emulation.links", links);
    if (anyData)
        out.insert("worker_data", protocol::workerDataJson(data));
    return out;
}

std::optional<ClusterSpec> ClusterSpec::load(const QString &path, QString *error)
{
    const auto json = readStructuredFile(path, error);
    if (!json)
        return std::nullopt;
    QString why;
    auto spec = fromJson(*json, &why);
    if (!spec)
        *error = QStringLiteral("%1: %2").arg(path, why);
    return spec;
}

} // namespace dlion::core
