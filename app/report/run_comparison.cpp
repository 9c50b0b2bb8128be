#include "run_comparison.h"

#include "report_content.h"

#include <QJsonArray>

#include <algorithm>
#include <cmath>

namespace dlion::report {

namespace {

QJsonValue opt(const std::optional<double> &v) { return v ? QJsonValue(*v) : QJsonValue(QJsonValue::Null); }

std::optional<double> timeTo(const core::RunData &d, double target)
{
    return target > 0 ? d.timeToAccuracy(target) : std::nullopt;
}

} // namespace

Comparison Comparison::build(const QList<core::StoredRun> &runs, qint64 baselineId, double target, double budgetS)
{
    Comparison c;
    if (runs.isEmpty())
        return c;
    if (target <= 0) {
        const double first = runs.first().data.job().budget.targetAccuracy;
        const bool agree = std::all_of(runs.begin(), runs.end(), [first](const core::StoredRun &r) {
            return r.data.job().budget.targetAccuracy == first;
        });
        target = agree && first > 0 ? first : 0.80;
    }
    if (budgetS <= 0) {
        budgetS = runs.first().data.trainingSeconds();
        for (const auto &r : runs)
            budgetS = std::min(budgetS, r.data.trainingSeconds());
    }
    c.target = target;
    c.budgetS = budgetS;
    c.baselineId = baselineId > 0 ? baselineId : runs.first().info.id;
    for (const auto &r : runs) {
        ComparisonRow row;
        row.runId = r.info.id;
        row.label = QStringLiteral("#%1 %2").arg(r.info.id).arg(r.info.strategy);
        row.strategy = r.info.strategy;
        row.workers = r.info.workers;
        row.status = r.info.status;
        const auto last = r.data.lastGlobalEval();
        row.finalAccuracy = last ? last->globalAccuracy : 0;
        row.timeTo80 = timeTo(r.data, 0.80);
        row.timeTo85 = timeTo(r.data, 0.85);
        row.timeToTarget = timeTo(r.data, target);
        for (const auto &e : r.data.evals()) {
            if (e.primary && e.t <= budgetS + 1e-9)
                row.accuracyAtBudget = e.globalAccuracy;
        }
        row.bytesSent = r.data.totalBytesSent();
        row.trainS = r.data.trainingSeconds();
        row.samplesPerS = row.trainS > 0 ? double(r.data.totalSamples()) / row.trainS : 0;
        row.isBaseline = r.info.id == c.baselineId;
        row.curve = ReportSeries::from(r.data, 1).accuracyVsTime;
        row.curve.name = row.label;
        c.rows.append(row);
    }
    const auto base = std::find_if(c.rows.begin(), c.rows.end(), [](const ComparisonRow &r) { return r.isBaseline; });
    for (auto &row : c.rows) {
        if (base != c.rows.end() && base->timeToTarget && row.timeToTarget && *row.timeToTarget > 0)
            row.speedup = *base->timeToTarget / *row.timeToTarget;
    }
    return c;
}

bool Comparison::hasExtraTarget() const
{
    return std::abs(target - 0.80) > 1e-9 && std::abs(target - 0.85) > 1e-9;
}

QString Comparison::targetText() const
{
    return QStringLiteral("%1%").arg(100 * target, 0, 'g', 4);
}

QString Comparison::toText() const
{
    const bool extra = hasExtraTarget();
    QStringList header = {QStringLiteral("run"), QStringLiteral("workers"), QStringLiteral("final acc"),
                          QStringLiteral("to 80%"), QStringLiteral("to 85%")};
    if (extra)
        header << QStringLiteral("to %1").arg(targetText());
    header << QStringLiteral("acc @ %1").arg(content::seconds(budgetS)) << QStringLiteral("MB sent")
           << QStringLiteral("samples/s") << QStringLiteral("speedup");
    QList<QStringList> cells{header};
    for (const auto &r : rows) {
        QStringList line = {r.label + (r.isBaseline ? QStringLiteral(" (baseline)") : QString()),
                            QString::number(r.workers), content::percent(r.finalAccuracy),
                            content::optionalSeconds(r.timeTo80), content::optionalSeconds(r.timeTo85)};
        if (extra)
            line << content::optionalSeconds(r.timeToTarget);
        line << content::percent(r.accuracyAtBudget) << QString::number(double(r.bytesSent) / 1e6, 'f', 1)
             << QString::number(r.samplesPerS, 'f', 0)
             << (r.speedup ? QStringLiteral("%1x").arg(*r.speedup, 0, 'f', 2) : QStringLiteral("–"));
        cells.append(line);
    }
    QList<int> width(header.size(), 0);
    for (const auto &line : cells) {
        for (int k = 0; k < line.size(); ++k)
            width[k] = std::max(width[k], int(line[k].size()));
    }
    QString out;
    for (const auto &line : cells) {
        QStringList padded;
        for (int k = 0; k < line.size(); ++k)
            padded << (k == 0 ? line[k].leftJustified(width[k]) : line[k].rightJustified(width[k]));
        QString text = padded.join(QStringLiteral("  "));
        while (text.endsWith(QLatin1Char(' ')))
            text.chop(1);
        out += text + QLatin1Char('\n');
    }
    out += QStringLiteral("speedup: the baseline's time to %1 over the run's; accuracy at budget: the last evaluation within %2 of training.\n")
               .arg(targetText(), content::seconds(budgetS));
    return out;
}

QJsonObject Comparison::toJson() const
{
    QJsonArray list;
    for (const auto &r : rows) {
        list.append(QJsonObject{{"run", r.runId},
                                {"strategy", r.strategy},
                                {"workers", r.workers},
                                {"status", r.status},
                                {"baseline", r.isBaseline},
                                {"final_accuracy", r.finalAccuracy},
                                {"time_to_accuracy", QJsonObject{{"0.80", opt(r.timeTo80)},
                                                                 {"0.85", opt(r.timeTo85)},
                                                                 {QString::number(target, 'f', 2), opt(r.timeToTarget)}}},
                                {"accuracy_at_budget", r.accuracyAtBudget},
                                {"bytes_sent", r.bytesSent},
                                {"samples_per_s", r.samplesPerS},
                                {"train_s", r.trainS},
                                {"speedup", opt(r.speedup)}});
    }
    return QJsonObject{{"target_accuracy", target}, {"budget_s", budgetS}, {"baseline", baselineId}, {"results", list}};
}

QString Comparison::toHtmlTable() const
{
    const bool extra = hasExtraTarget();
    auto cell = [](const QString &tag, const QString &text) { return QStringLiteral("<%1>%2</%1>").arg(tag, text.toHtmlEscaped()); };
    QString h = QStringLiteral("<table class=\"grid\"><tr>");
    QStringList head = {QStringLiteral("run"), QStringLiteral("workers"), QStringLiteral("final accuracy"),
                        QStringLiteral("time to 80%"), QStringLiteral("time to 85%")};
    if (extra)
        head << QStringLiteral("time to %1").arg(targetText());
    head << QStringLiteral("accuracy at %1").arg(content::seconds(budgetS)) << QStringLiteral("bytes sent")
         << QStringLiteral("throughput") << QStringLiteral("speedup");
    for (const QString &t : head)
        h += cell(QStringLiteral("th"), t);
    h += QStringLiteral("</tr>");
    for (const auto &r : rows) {
        QStringList line = {r.label + (r.isBaseline ? QStringLiteral(" (baseline)") : QString()),
                            QString::number(r.workers), content::percent(r.finalAccuracy),
                            content::optionalSeconds(r.timeTo80), content::optionalSeconds(r.timeTo85)};
        if (extra)
            line << content::optionalSeconds(r.timeToTarget);
        line << content::percent(r.accuracyAtBudget) << content::megabytes(r.bytesSent) << content::rate(r.samplesPerS)
             << (r.speedup ? QStringLiteral("%1x").arg(*r.speedup, 0, 'f', 2) : QStringLiteral("–"));
        h += QStringLiteral("<tr>");
        for (const QString &t : line)
            h += cell(QStringLiteral("td"), t);
        h += QStringLiteral("</tr>");
    }
    return h + QStringLiteral("</table>");
}

} // namespace dlion::report
