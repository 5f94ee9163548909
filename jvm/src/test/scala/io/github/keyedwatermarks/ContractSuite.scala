package io.github.keyedwatermarks

import org.scalatest.funsuite.AnyFunSuite

import io.github.keyedwatermarks.connect.KeyedWatermarksRelationPlugin
import io.github.keyedwatermarks.contract.Contract
import io.github.keyedwatermarks.python.PythonAPI
import io.github.keyedwatermarks.state.KeyState
import io.github.keyedwatermarks.watermark.HeldWatermark

/** The names in [[Contract]] are those of the classes and layouts they stand for. */
class ContractSuite extends AnyFunSuite {
  test("class names are the classes'") {
    assert(Contract.ExtensionsClass == classOf[KeyedWatermarksExtensions].getName)
    assert(Contract.PythonApiClass == PythonAPI.getClass.getName.stripSuffix("$"))
    assert(Contract.ConnectPluginClass == classOf[KeyedWatermarksRelationPlugin].getName)
  }

  test("the state fields read_key_state decodes are in the key's record, Long.MinValue is undefined") {
    val fields = KeyState.WatermarkSchema.fieldNames.toSet
    assert(Contract.KeyStateFields.filterNot(fields.contains).isEmpty)
    assert(Contract.StateUndefined == HeldWatermark.Undefined)
  }
}
