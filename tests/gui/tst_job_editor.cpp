// Every strategy knob the job editor offers reaches a real run: the knobs
// set in the editor go through `dlion run --config` into the engine, which
// refuses a knob it does not know (as it once did Hop's "staleness").
#include <job_editor.h>

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include <functional>

using namespace dlion;

Q_DECLARE_METATYPE(std::function<void(ui::JobEditor &)>)

namespace {

template <typename T>
T *fieldAs(ui::JobEditor &e, const char *key)
{
    auto *w = qobject_cast<T *>(e.field(QLatin1String(key)));
    if (!w)
        qFatal("the job editor has no field %s", key);
    return w;
}

void select(ui::JobEditor &e, const char *key, const QString &data)
{
    auto *c = fieldAs<QComboBox>(e, key);
    c->setCurrentIndex(c->findData(data));
}

} // namespace

class TestJobEditor : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void knobsReachTheEngine_data();
    void knobsReachTheEngine();
};

void TestJobEditor::knobsReachTheEngine_data()
{
    using Set = std::function<void(ui::JobEditor &)>;
    QTest::addColumn<QString>("strategy");
    QTest::addColumn<Set>("set");
    QTest::addColumn<QJsonObject>("expected");
    QTest::newRow("dlion") << "dlion" << Set([](ui::JobEditor &e) {
        fieldAs<QSpinBox>(e, "strategy_options.dkt_period")->setValue(3);
        fieldAs<QDoubleSpinBox>(e, "strategy_options.dkt_alpha")->setValue(0.3);
    }) << QJsonObject{{"dkt_period", 3}, {"dkt_alpha", 0.3}, {"staleness", 0}};
    QTest::newRow("allreduce") << "allreduce" << Set([](ui::JobEditor &) {}) << QJsonObject{};
    QTest::newRow("gaia") << "gaia" << Set([](ui::JobEditor &e) {
        fieldAs<QDoubleSpinBox>(e, "strategy_options.threshold")->setValue(2);
    }) << QJsonObject{{"threshold", 0.02}};
    QTest::newRow("ako") << "ako" << Set([](ui::JobEditor &e) {
        fieldAs<QSpinBox>(e, "strategy_options.partitions")->setValue(4);
    }) << QJsonObject{{"partitions", 4}};
    QTest::newRow("hop") << "hop" << Set([](ui::JobEditor &e) {
        fieldAs<QSpinBox>(e, "strategy_options.backup")->setValue(1);
        fieldAs<QSpinBox>(e, "strategy_options.staleness")->setValue(2);
        fieldAs<QCheckBox>(e, "strategy_options.skip")->setChecked(true);
        select(e, "strategy_options.topology", "all");
    }) << QJsonObject{{"backup", 1}, {"staleness", 2}, {"skip", true}, {"topology", "all"}};
}

void TestJobEditor::knobsReachTheEngine()
{
    QFETCH(QString, strategy);
    QFETCH(std::function<void(ui::JobEditor &)>, set);
    QFETCH(QJsonObject, expected);
    ui::JobEditor editor;
    select(editor, "strategy", strategy);
    set(editor);
    QVERIFY2(editor.validate().isEmpty(), qPrintable(editor.validate()));
    const QJsonObject job = editor.job();
    const QJsonObject options = job.value("strategy_options").toObject();
    for (auto it = expected.begin(); it != expected.end(); ++it)
        QCOMPARE(options.value(it.key()), it.value());

    QTemporaryDir dir;
    QFile file(dir.filePath("job.json"));
    QVERIFY(file.open(QIODevice::WriteOnly) && file.write(QJsonDocument(job).toJson()) > 0);
    file.close();
    QProcess run;
    run.start(qEnvironmentVariable("DLION_CLI"), {"run", "--config", file.fileName(), "--workers", "3", "--dataset", "synthetic",
                                                  "--model", "mlp", "--max-rounds", "6", "--out", dir.filePath("run"), "--quiet"});
    QVERIFY(run.waitForFinished(120000));
    const QString said = QString::fromUtf8(run.readAllStandardOutput() + run.readAllStandardError());
    QVERIFY2(run.exitCode() == 0, qPrintable(said));
    QFile summary(dir.filePath("run/summary.json"));
    QVERIFY(summary.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(summary.readAll()).object();
    QCOMPARE(s.value("strategy").toString(), strategy);
    QCOMPARE(s.value("rounds").toArray().at(2).toArray().size(), 6);
}

QTEST_MAIN(TestJobEditor)
#include "tst_job_editor.moc"
