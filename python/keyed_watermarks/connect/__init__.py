"""The Spark Connect client of keyed-watermarks (backend.py). Its server side is the plugin
``io.github.keyedwatermarks.connect.KeyedWatermarksRelationPlugin`` in the keyed-watermarks jar.

Nothing here is imported by ``import keyed_watermarks`` except these two names, which need
neither the Connect client's dependencies (grpc, protobuf) nor a JVM."""

from keyed_watermarks._contract import CONNECT_PLUGIN_CLASS

PLUGIN_CLASS = CONNECT_PLUGIN_CLASS
PLUGIN_CONF = "spark.connect.extensions.relation.classes"
