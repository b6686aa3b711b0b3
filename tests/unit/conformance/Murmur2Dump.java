// Prints Kafka's own key hashing for byte strings, for tests/unit/test_partition_conformance.py.
//
// stdin: one hex-encoded byte string (a role name's UTF-8) per line.
// args:  partition counts.
// stdout, per input line: "M <hex> <murmur2> <toPositive> <partition for each count>",
// where murmur2 is the signed 32-bit org.apache.kafka.common.utils.Utils.murmur2,
// toPositive is Utils.toPositive of it, and each partition is the producer's own
// BuiltInPartitioner.partitionForKey (which must equal toPositive % count; the
// program exits 2 if it does not). The bytes must be UTF-8 that Java's
// StringSerializer gives back unchanged (so a Java client keying by the role
// String lands on the same partition); exit 2 otherwise.
// Lines not starting with "M " are to be ignored.
//
// Compile and run against kafka-clients from the local broker's jars folder:
//   javac -cp '<jars>/*' -d OUT Murmur2Dump.java
//   java -cp 'OUT:<jars>/*' Murmur2Dump 1 3 16 50 < hex-lines
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Utils;

public final class Murmur2Dump {
    private Murmur2Dump() {
    }

    static byte[] fromHex(String hex) {
        byte[] out = new byte[hex.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    public static void main(String[] args) throws IOException {
        int[] counts = new int[args.length];
        for (int i = 0; i < args.length; i++) {
            counts[i] = Integer.parseInt(args[i]);
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.US_ASCII));
        StringSerializer serializer = new StringSerializer();
        String line;
        while ((line = in.readLine()) != null) {
            String hex = line.trim();
            byte[] key = fromHex(hex);
            String role = new String(key, StandardCharsets.UTF_8);
            if (!Arrays.equals(key, serializer.serialize("roles", role))) {
                System.err.println("not UTF-8 that StringSerializer reproduces: " + hex);
                System.exit(2);
            }
            int hash = Utils.murmur2(key);
            int positive = Utils.toPositive(hash);
            StringBuilder row = new StringBuilder("M ").append(hex).append(' ').append(hash).append(' ').append(positive);
            for (int count : counts) {
                int partition = BuiltInPartitioner.partitionForKey(key, count);
                if (partition != positive % count) {
                    System.err.println("partitionForKey disagrees with toPositive % count for " + hex);
                    System.exit(2);
                }
                row.append(' ').append(partition);
            }
            out.write(row.append('\n').toString());
        }
        out.flush();
    }
}
