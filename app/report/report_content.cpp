#include "report_content.h"

#include <QJsonArray>
#include <QJsonDocument>

namespace dlion::report::content {

namespace {

QString esc(const QString &s) { return s.toHtmlEscaped(); }

// summary.json's final_model: what a Python user needs to know of the file.
QString finalModelText(const QJsonObject &m)
{
    QStringList shape;
    for (const QJsonValue &d : m.value("input_shape").toArray())
        shape << QString::number(d.toInteger());
    const QString stateDict = m.value("state_dict_sha256").toString();
    return QStringLiteral("%1, %2 parameters, input %3, SHA-256 %4%5")
        .arg(m.value("format").toString())
        .arg(m.value("parameters").toInteger())
        .arg(shape.join(QStringLiteral(" × ")), m.value("sha256").toString(),
             stateDict.isEmpty() ? QString() : QStringLiteral("; state_dict SHA-256 ") + stateDict);
}

QString row(const QString &key, const QString &valueHtml)
{
    return QStringLiteral("<tr><th>%1</th><td>%2</td></tr>").arg(esc(key), valueHtml);
}

QString when(const QDateTime &t)
{
    return t.isValid() ? esc(t.toUTC().toString(QStringLiteral("yyyy-MM-dd HH:mm:ss 'UTC'"))) : QStringLiteral("–");
}

QString compactJson(const QJsonValue &v)
{
    if (v.isObject())
        return QString::fromUtf8(QJsonDocument(v.toObject()).toJson(QJsonDocument::Compact));
    if (v.isArray())
        return QString::fromUtf8(QJsonDocument(v.toArray()).toJson(QJsonDocument::Compact));
    return v.toVariant().toString();
}

} // namespace

QString seconds(double s) { return QStringLiteral("%1 s").arg(s, 0, 'f', s < 100 ? 1 : 0); }
QString optionalSeconds(const std::optional<double> &s) { return s ? seconds(*s) : QStringLiteral("not reached"); }
QString percent(double f) { return QStringLiteral("%1%").arg(100 * f, 0, 'f', 2); }
QString megabytes(qint64 b) { return QStringLiteral("%1 MB").arg(double(b) / 1e6, 0, 'f', 1); }
QString rate(double r) { return QStringLiteral("%1 samples/s").arg(r, 0, 'f', 0); }

QString title(const core::StoredRun &run)
{
    const auto &i = run.info;
    return QStringLiteral("DLion run %1: %2, %3 on %4").arg(i.id).arg(i.strategy, i.model, i.dataset);
}

QString subtitle(const core::StoredRun &run)
{
    const auto &i = run.info;
    return QStringLiteral("%1 · %2 workers · started %3").arg(i.status).arg(i.workers).arg(
        (i.startedAt.isValid() ? i.startedAt : i.createdAt).toUTC().toString(QStringLiteral("yyyy-MM-dd HH:mm 'UTC'")));
}

QString summaryTable(const core::StoredRun &run)
{
    const auto &i = run.info;
    const QJsonObject job = run.data.job().toJson();
    QString h = QStringLiteral("<table class=\"kv\">");
    h += row(QStringLiteral("Run"), QStringLiteral("%1 (%2)").arg(i.id).arg(esc(i.status)));
    if (!i.message.isEmpty())
        h += row(QStringLiteral("Message"), esc(i.message));
    h += row(QStringLiteral("Strategy"), esc(i.strategy));
    h += row(QStringLiteral("Model / dataset"), esc(i.model + QStringLiteral(" / ") + i.dataset));
    h += row(QStringLiteral("Partition"), esc(job.value("partition").toString()));
    h += row(QStringLiteral("Workers"), QString::number(i.workers));
    const QJsonObject budget = job.value("budget").toObject();
    QStringList limits;
    if (budget.value("seconds").toDouble() > 0)
        limits << QStringLiteral("%1 s").arg(budget.value("seconds").toDouble());
    if (budget.value("epochs").toDouble() > 0)
        limits << QStringLiteral("%1 epochs").arg(budget.value("epochs").toDouble());
    if (budget.value("target_accuracy").toDouble() > 0)
        limits << QStringLiteral("accuracy %1").arg(percent(budget.value("target_accuracy").toDouble()));
    if (budget.value("max_rounds").toDouble() > 0)
        limits << QStringLiteral("%1 rounds").arg(budget.value("max_rounds").toInteger());
    h += row(QStringLiteral("Budget"), esc(limits.join(QStringLiteral(", "))));
    h += row(QStringLiteral("Optimizer"), esc(QStringLiteral("batch %1/worker, lr %2, momentum %3, weight decay %4, %5")
                                                  .arg(job.value("batch_size").toInt())
                                                  .arg(job.value("lr").toDouble())
                                                  .arg(job.value("momentum").toDouble())
                                                  .arg(job.value("weight_decay").toDouble())
                                                  .arg(job.value("lr_schedule").toString())));
    const QJsonArray slowdown = job.value("slowdown").toArray();
    h += row(QStringLiteral("Slowdown"), slowdown.isEmpty() ? QStringLiteral("none (every worker 1x)") : esc(compactJson(slowdown)));
    if (!job.value("strategy_options").toObject().isEmpty())
        h += row(QStringLiteral("Strategy options"), esc(compactJson(job.value("strategy_options"))));
    if (!job.value("emulation").toObject().isEmpty())
        h += row(QStringLiteral("Emulation"), esc(compactJson(job.value("emulation"))));
    h += row(QStringLiteral("Seed"), esc(job.value("seed").toVariant().toString()));
    h += row(QStringLiteral("Cluster"), esc(i.cluster.isEmpty() ? QStringLiteral("–") : compactJson(i.cluster)));
    h += row(QStringLiteral("Host"), esc(i.host));
    h += row(QStringLiteral("Code version"), esc(i.codeVersion));
    h += row(QStringLiteral("Created"), when(i.createdAt));
    h += row(QStringLiteral("Started / ended"), when(i.startedAt) + QStringLiteral(" / ") + when(i.endedAt));
    if (!i.outDir.isEmpty())
        h += row(QStringLiteral("Run folder"), esc(i.outDir));
    if (!i.tags.isEmpty())
        h += row(QStringLiteral("Tags"), esc(i.tags.join(QStringLiteral(", "))));
    for (const auto &n : i.notes)
        h += row(QStringLiteral("Note"), esc(n.text) + QStringLiteral(" <span class=\"dim\">(") + when(n.createdAt)
                                             + QStringLiteral(")</span>"));
    return h + QStringLiteral("</table>");
}

QString metricsTable(const core::StoredRun &run)
{
    const QJsonObject s = run.data.summary();
    const QJsonObject tta = s.value("time_to_accuracy").toObject();
    QString h = QStringLiteral("<table class=\"kv\">");
    h += row(QStringLiteral("Final test accuracy (mean replica)"), percent(s.value("final_accuracy").toDouble()));
    h += row(QStringLiteral("Worst / best replica"), percent(s.value("final_min_accuracy").toDouble()) + QStringLiteral(" / ")
                                                         + percent(s.value("final_max_accuracy").toDouble()));
    h += row(QStringLiteral("Consensus model"), percent(s.value("final_consensus_accuracy").toDouble()));
    if (const QJsonObject model = s.value("final_model").toObject(); !model.isEmpty())
        h += row(QStringLiteral("Final model"), esc(finalModelText(model)));
    h += row(QStringLiteral("Evaluation rule"), QString::fromLatin1(core::kEvaluationRule).toHtmlEscaped());
    h += row(QStringLiteral("Final test loss"), QString::number(s.value("final_loss").toDouble(), 'f', 4));
    for (auto it = tta.begin(); it != tta.end(); ++it) {
        h += row(QStringLiteral("Time to %1% accuracy").arg(100 * it.key().toDouble(), 0, 'g', 4),
                 it.value().isNull() ? QStringLiteral("not reached") : seconds(it.value().toDouble()));
    }
    h += row(QStringLiteral("Training time"), seconds(s.value("train_s").toDouble()));
    h += row(QStringLiteral("Wall time"), seconds(s.value("wall_s").toDouble()));
    h += row(QStringLiteral("Throughput"), rate(s.value("samples_per_s").toDouble()));
    h += row(QStringLiteral("Samples"), QString::number(s.value("samples").toInteger()));
    h += row(QStringLiteral("Bytes sent"), megabytes(s.value("bytes_sent").toInteger()));
    h += row(QStringLiteral("Merges"), QString::number(s.value("merges").toInt()));
    return h + QStringLiteral("</table>");
}

QString workersTable(const core::StoredRun &run)
{
    const QJsonArray workers = run.data.summary().value("per_worker").toArray();
    QString h = QStringLiteral(
        "<table class=\"grid\"><tr><th>worker</th><th>slowdown</th><th>rounds</th><th>samples</th>"
        "<th>mean share</th><th>mean rate</th><th>outcome</th></tr>");
    for (const QJsonValue &v : workers) {
        const QJsonObject w = v.toObject();
        QString outcome = w.value("lost").isString() ? QStringLiteral("lost: ") + w.value("lost").toString()
                                                     : w.value("outcome").toObject().value("ok").toBool() ? QStringLiteral("ok")
                                                                                                         : QStringLiteral("–");
        if (outcome == QLatin1String("–") && !w.value("outcome").toObject().value("message").toString().isEmpty())
            outcome = w.value("outcome").toObject().value("message").toString();
        h += QStringLiteral("<tr><td>%1</td><td>%2x</td><td>%3</td><td>%4</td><td>%5</td><td>%6</td><td>%7</td></tr>")
                 .arg(w.value("worker").toInt())
                 .arg(w.value("slowdown").toDouble())
                 .arg(w.value("rounds").toInteger())
                 .arg(w.value("samples").toInteger())
                 .arg(percent(w.value("mean_share").toDouble()))
                 .arg(rate(w.value("mean_rate").toDouble()))
                 .arg(esc(outcome));
    }
    return h + QStringLiteral("</table>");
}

QString dataTable(const core::StoredRun &run)
{
    const QStringList &names = run.data.job().classNames;
    QString h = QStringLiteral("<table class=\"grid\"><tr><th>worker</th><th>dataset</th><th>folder</th>"
                               "<th>training samples</th><th>test samples</th><th>samples per class</th></tr>");
    for (int w = 0; w < run.data.workers(); ++w) {
        const auto &d = run.data.dataSummary(w);
        if (!d)
            continue;
        QStringList classes;
        for (qsizetype c = 0; c < d->histogram.size(); ++c)
            classes.append(QStringLiteral("%1: %2").arg(names.value(c, QString::number(c))).arg(d->histogram[c]));
        h += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td><td>%5</td><td>%6</td></tr>")
                 .arg(w)
                 .arg(esc(d->dataset), esc(d->dataDir.isEmpty() ? QStringLiteral("–") : d->dataDir))
                 .arg(d->samples)
                 .arg(d->testSamples)
                 .arg(esc(classes.join(QStringLiteral(", "))));
    }
    return h + QStringLiteral("</table>");
}

QString mergesTable(const core::StoredRun &run, int maxRows)
{
    const auto &merges = run.data.merges();
    if (merges.isEmpty())
        return QStringLiteral("<p class=\"empty\">No merge events in this run (direct knowledge transfer was off or never triggered).</p>");
    QString h = QStringLiteral(
        "<table class=\"grid\"><tr><th>time</th><th>round</th><th>from</th><th>to</th><th>score before</th>"
        "<th>score of best</th><th>α</th><th>trigger</th></tr>");
    for (int k = 0; k < std::min<int>(maxRows, int(merges.size())); ++k) {
        const auto &m = merges[k];
        h += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td><td>%5</td><td>%6</td><td>%7</td><td>%8</td></tr>")
                 .arg(seconds(m.t))
                 .arg(m.round)
                 .arg(m.from)
                 .arg(m.to)
                 .arg(percent(m.scoreBefore))
                 .arg(percent(m.scoreFrom))
                 .arg(m.alpha, 0, 'f', 2)
                 .arg(m.manual ? QStringLiteral("manual") : QStringLiteral("periodic"));
    }
    h += QStringLiteral("</table>");
    if (merges.size() > maxRows)
        h += QStringLiteral("<p class=\"dim\">… and %1 more (all are in the CSV and JSON exports).</p>").arg(merges.size() - maxRows);
    return h;
}

} // namespace dlion::report::content
