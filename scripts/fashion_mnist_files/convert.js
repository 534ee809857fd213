// Writes Fashion-MNIST (the IDX files of Debian's dataset-fashion-mnist) as the three kinds of
// files `lockstep train --data` reads, with programs that are not Lockstep: PNG class folders
// (pngjs), CSV (label,pixel1..pixel784, as Kaggle's fashion-mnist_{train,test}.csv) and 4 TFRecord
// shards of tf.train.Example with an `image` PNG bytes feature and a `label` int64 feature
// (@roboflow/tfrecords). Run by convert.sh.
"use strict";
const fs = require("fs");
const path = require("path");
const zlib = require("zlib");
const { PNG } = require("pngjs");
const { TFRecordsBuilder, FeatureType } = require("@roboflow/tfrecords");

const [src, out] = process.argv.slice(2);

function readIdx(name) {
  let p = path.join(src, name);
  let bytes = fs.existsSync(p) ? fs.readFileSync(p) : zlib.gunzipSync(fs.readFileSync(p + ".gz"));
  const rank = bytes[3];
  const dims = [];
  for (let i = 0; i < rank; i++) dims.push(bytes.readUInt32BE(4 + 4 * i));
  return { dims, data: bytes.subarray(4 + 4 * rank) };
}

function png(pixels) {
  const img = new PNG({ width: 28, height: 28, colorType: 0, inputColorType: 0, bitDepth: 8 });
  return PNG.sync.write({ width: 28, height: 28, data: Buffer.from(pixels) },
                        { colorType: 0, inputColorType: 0 });
}

for (const [split, prefix] of [["train", "train"], ["test", "t10k"]]) {
  const x = readIdx(`${prefix}-images-idx3-ubyte`);
  const y = readIdx(`${prefix}-labels-idx1-ubyte`);
  const n = x.dims[0];
  const dir = path.join(out, "png", split);
  for (let c = 0; c < 10; c++) fs.mkdirSync(path.join(dir, String(c)), { recursive: true });
  const csv = ["label," + Array.from({ length: 784 }, (_, i) => "pixel" + (i + 1)).join(",")];
  const shards = [[], [], [], []];
  for (let i = 0; i < n; i++) {
    const pixels = x.data.subarray(i * 784, (i + 1) * 784);
    const label = y.data[i];
    const bytes = png(pixels);
    fs.writeFileSync(path.join(dir, String(label), String(i).padStart(5, "0") + ".png"), bytes);
    csv.push(label + "," + Array.from(pixels).join(","));
    const b = new TFRecordsBuilder();
    b.addFeature("image", FeatureType.Binary, bytes);
    b.addFeature("label", FeatureType.Int64, label);
    shards[i % 4].push(b.build());
  }
  fs.mkdirSync(path.join(out, "csv"), { recursive: true });
  fs.writeFileSync(path.join(out, "csv", split + ".csv"), csv.join("\n") + "\n");
  fs.mkdirSync(path.join(out, "tfrecord"), { recursive: true });
  shards.forEach((records, s) =>
    fs.writeFileSync(path.join(out, "tfrecord", `${split}-${s}-of-4.tfrecord`),
                     TFRecordsBuilder.buildTFRecords(records)));
}
