// Every knob of the strategy schema (protocol/strategy_knobs.h) has an input
// in the job editor, and a value set there reaches a real run: through
// `dlion run --config` into the agents, whose JobSpec and engine refuse a
// knob they do not know (as they once did Hop's "staleness").
#include <host_dialog.h>
#include <job_builder.h>
#include <job_editor.h>
#include <strategy_knobs.h>

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

#include <algorithm>
#include <cmath>

using namespace dlion;

namespace {

using protocol::Knob;

bool sameValue(const QJsonValue &a, const QJsonValue &b)
{
    return a.isDouble() && b.isDouble() ? std::abs(a.toDouble() - b.toDouble()) <= 1e-9 * std::max(1.0, std::abs(b.toDouble()))
                                        : a == b;
}

// A value in the knob's range other than its default (for a derived
// default: the lowest), so the editor has to put it in the job.
QJsonValue otherValue(const Knob &k)
{
    switch (k.type) {
    case Knob::Type::Flag:
        return !k.defaultValue.toBool();
    case Knob::Type::Choice:
        for (const protocol::KnobChoice &c : k.choices) {
            if (c.value != k.defaultValue.toString())
                return c.value;
        }
        return QJsonValue::Undefined;
    case Knob::Type::Integer:
    case Knob::Type::Number:
        break;
    }
    if (k.derivedDefault())
        return k.lo;
    const double step = k.type == Knob::Type::Integer ? 1 : (k.hi - k.lo) / 100;
    const double d = k.defaultValue.toDouble();
    return d + step <= k.hi ? d + step : d - step;
}

// Sets the knob's input as a user would; false if the editor has none of the knob's kind.
bool setInput(ui::JobEditor &e, const Knob &k, const QJsonValue &v)
{
    QWidget *w = e.field("strategy_options." + k.name);
    if (auto *c = qobject_cast<QCheckBox *>(w))
        c->setChecked(v.toBool());
    else if (auto *c = qobject_cast<QComboBox *>(w))
        c->setCurrentIndex(c->findData(v.toString()));
    else if (auto *s = qobject_cast<QSpinBox *>(w))
        s->setValue(v.toInt());
    else if (auto *d = qobject_cast<QDoubleSpinBox *>(w))
        d->setValue(v.toDouble() * k.scale);
    else
        return false;
    return true;
}

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

void selectStrategy(ui::JobEditor &e, const QString &name)
{
    auto *c = qobject_cast<QComboBox *>(e.field("strategy"));
    QVERIFY(c);
    c->setCurrentIndex(c->findData(name));
    QCOMPARE(c->currentData().toString(), name);
}

} // namespace

class TestJobEditor : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void knobsReachTheEngine_data();
    void knobsReachTheEngine();
    void dataFieldsMakeAValidJob();
    void hostDialogEditsTheHostsData();
    void defaultsStayOutOfTheJob();
};

void TestJobEditor::knobsReachTheEngine_data()
{
    QTest::addColumn<QString>("strategy");
    for (const protocol::StrategyInfo &s : protocol::strategies())
        QTest::newRow(qPrintable(s.name)) << s.name;
}

void TestJobEditor::knobsReachTheEngine()
{
    // Every knob of the strategy's schema is set in the editor to a value
    // other than its default, and the run's recorded job holds them all.
    QFETCH(QString, strategy);
    ui::JobEditor editor;
    selectStrategy(editor, strategy);
    QJsonObject expected;
    for (const Knob &k : protocol::findStrategy(strategy)->knobs) {
        const QJsonValue v = otherValue(k);
        QVERIFY2(setInput(editor, k, v), qPrintable("the job editor has no input for " + k.name));
        expected.insert(k.name, v);
    }
    QVERIFY2(editor.validate().isEmpty(), qPrintable(editor.validate()));
    const QJsonObject job = editor.job();
    const QJsonObject options = job.value("strategy_options").toObject();
    QCOMPARE(options.keys(), expected.keys());
    for (auto it = expected.begin(); it != expected.end(); ++it)
        QVERIFY2(sameValue(options.value(it.key()), it.value()), qPrintable(it.key()));

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
    const QJsonObject ran = s.value("job").toObject().value("strategy_options").toObject();
    QCOMPARE(ran.keys(), expected.keys());
    for (auto it = expected.begin(); it != expected.end(); ++it)
        QVERIFY2(sameValue(ran.value(it.key()), options.value(it.key())), qPrintable(it.key()));
}

void TestJobEditor::defaultsStayOutOfTheJob()
{
    // A fresh editor and one loaded with a job's knobs: every strategy's
    // knobs start at the schema's defaults, so the job names none of them,
    // and a loaded value comes back out.
    ui::JobEditor editor;
    for (const protocol::StrategyInfo &s : protocol::strategies()) {
        selectStrategy(editor, s.name);
        QCOMPARE(editor.job().value("strategy_options").toObject(), QJsonObject());
        for (const Knob &k : s.knobs) {
            const QJsonValue v = otherValue(k);
            editor.setJob({{"strategy", s.name}, {"strategy_options", QJsonObject{{k.name, v}}}});
            const QJsonObject options = editor.job().value("strategy_options").toObject();
            QCOMPARE(options.keys(), QStringList{k.name});
            QVERIFY2(sameValue(options.value(k.name), v), qPrintable(k.name));
            editor.setJob({{"strategy", s.name}, {"strategy_options", QJsonObject{}}});
            QCOMPARE(editor.job().value("strategy_options").toObject(), QJsonObject());
        }
    }
}

void TestJobEditor::dataFieldsMakeAValidJob()
{
    ui::JobEditor editor;
    select(editor, "dataset", "imagefolder");
    fieldAs<QLineEdit>(editor, "worker_data")->setText("/data/a, /data/b");
    select(editor, "test_set", "shared");
    fieldAs<QLineEdit>(editor, "class_names")->setText("cat, dog");
    fieldAs<QLineEdit>(editor, "lr_schedule")->setText(" warmup:50+step:1000:0.5 ");
    const QJsonObject job = editor.job();
    QString error;
    const auto request = core::buildJob({}, QJsonObject{{"workers", 2}, {"worker_data", job.value("worker_data")},
                                                       {"test_set", job.value("test_set")},
                                                       {"class_names", job.value("class_names")},
                                                       {"dataset", job.value("dataset")},
                                                       {"lr_schedule", job.value("lr_schedule")}},
                                        &error);
    QVERIFY2(request, qPrintable(error));
    QCOMPARE(request->spec.dataFor(1).dataDir, QStringLiteral("/data/b"));
    QCOMPARE(request->spec.dataFor(1).dataset, QStringLiteral("imagefolder"));
    QCOMPARE(request->spec.testSet, QStringLiteral("shared"));
    QCOMPARE(request->spec.classNames, (QStringList{"cat", "dog"}));
    QCOMPARE(request->spec.lrSchedule, QStringLiteral("warmup:50+step:1000:0.5"));
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
