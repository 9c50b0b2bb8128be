// Every strategy knob the job editor offers reaches a real run: the knobs
// set in the editor go through `dlion run --config` into the engine, which
// refuses a knob it does not know (as it once did Hop's "staleness").
#include <host_dialog.h>
#include <job_builder.h>
#include <job_editor.h>

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
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
    void dataFieldsMakeAValidJob();
    void hostDialogEditsTheHostsData();
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

void TestJobEditor::dataFieldsMakeAValidJob()
{
    ui::JobEditor editor;
    select(editor, "dataset", "imagefolder");
    fieldAs<QLineEdit>(editor, "worker_data")->setText("/data/a, /data/b");
    select(editor, "test_set", "shared");
    fieldAs<QLineEdit>(editor, "class_names")->setText("cat, dog");
    const QJsonObject job = editor.job();
    QString error;
    const auto request = core::buildJob({}, QJsonObject{{"workers", 2}, {"worker_data", job.value("worker_data")},
                                                       {"test_set", job.value("test_set")},
                                                       {"class_names", job.value("class_names")},
                                                       {"dataset", job.value("dataset")}},
                                        &error);
    QVERIFY2(request, qPrintable(error));
    QCOMPARE(request->spec.dataFor(1).dataDir, QStringLiteral("/data/b"));
    QCOMPARE(request->spec.dataFor(1).dataset, QStringLiteral("imagefolder"));
    QCOMPARE(request->spec.testSet, QStringLiteral("shared"));
    QCOMPARE(request->spec.classNames, (QStringList{"cat", "dog"}));
    ui::JobEditor loaded;
    loaded.setJob(job);
    QCOMPARE(loaded.job(), job);
}

void TestJobEditor::hostDialogEditsTheHostsData()
{
    const QJsonObject given{{"name", "edge"}, {"address", "h"}, {"user", "u"}, {"slowdown", 2}, {"data_dir", "/old"}};
    ui::HostDialog dialog(given);
    auto *dir = dialog.findChild<QLineEdit *>("hostDataDir");
    auto *format = dialog.findChild<QComboBox *>("hostDataset");
    QVERIFY(dir && format);
    QCOMPARE(dir->text(), QStringLiteral("/old"));
    dir->setText("/srv/photos");
    format->setCurrentIndex(format->findData("imagefolder"));
    const QJsonObject host = dialog.host();
    QCOMPARE(host.value("data_dir").toString(), QStringLiteral("/srv/photos"));
    QCOMPARE(host.value("dataset").toString(), QStringLiteral("imagefolder"));
    QCOMPARE(host.value("slowdown").toDouble(), 2.0);  // a field the dialog does not show stays
    dir->setText("");
    QVERIFY(!dialog.host().contains("data_dir"));
}

QTEST_MAIN(TestJobEditor)
#include "tst_job_editor.moc"
