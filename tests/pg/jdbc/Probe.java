// Run by tests/pg/test_drivers_jdbc.py as `java -cp postgresql.jar Probe.java URL PREFIX KEY...`
// (a single-file program: no build step). Prints one tab-separated line per fact, so the test
// can compare what partialflow and a real PostgreSQL answer to the same calls.
import java.sql.*;
import java.util.*;

public class Probe {
    static String cell(Object v) { return v == null ? "NULL" : v.toString(); }

    public static void main(String[] a) throws Exception {
        String url = a[0], prefix = a[1];
        try (Connection c = DriverManager.getConnection(url, "postgres", "")) {
            DatabaseMetaData md = c.getMetaData();
            System.out.println("version\t" + md.getDatabaseMajorVersion());
            try (ResultSet r = md.getTables(null, "public", prefix + "%", new String[]{"TABLE", "VIEW"})) {
                while (r.next()) System.out.println("table\t" + r.getString("TABLE_SCHEM") + "\t"
                    + r.getString("TABLE_NAME") + "\t" + r.getString("TABLE_TYPE"));
            }
            for (String t : new String[]{"visit", "by_user", "per_user"}) {
                try (ResultSet r = md.getColumns(null, "public", prefix + t, "%")) {
                    while (r.next()) System.out.println("column\t" + r.getString("TABLE_NAME") + "\t"
                        + r.getString("COLUMN_NAME") + "\t" + r.getInt("DATA_TYPE") + "\t"
                        + r.getString("TYPE_NAME") + "\t" + r.getInt("ORDINAL_POSITION") + "\t"
                        + r.getString("IS_NULLABLE") + "\t" + r.getInt("COLUMN_SIZE"));
                }
                try (ResultSet r = md.getPrimaryKeys(null, "public", prefix + t)) {
                    while (r.next()) System.out.println("pk\t" + r.getString("TABLE_NAME") + "\t"
                        + r.getString("COLUMN_NAME") + "\t" + r.getInt("KEY_SEQ") + "\t" + r.getString("PK_NAME"));
                }
            }
            Set<String> types = new TreeSet<>();
            try (ResultSet r = md.getTypeInfo()) {
                while (r.next()) types.add(r.getString("TYPE_NAME") + "/" + r.getInt("DATA_TYPE"));
            }
            for (String t : new String[]{"int8/-5", "float8/8", "text/12", "bool/-7"})
                System.out.println("typeinfo\t" + t + "\t" + types.contains(t));
            try (ResultSet r = md.getSchemas()) {
                while (r.next()) System.out.println("schema\t" + r.getString(1));
            }
            // Metabase's can-connect? check.
            try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("SELECT 1")) {
                r.next();
                System.out.println("select1\t" + r.getInt(1));
            }
            // Point lookups of the view, enough times that pgjdbc switches to a named
            // server-side statement (prepareThreshold 5).
            String sql = "SELECT id, user, dur, ok FROM " + prefix + "by_user WHERE user = ?";
            if (a.length > 2 && a[2].equals("--postgres"))
                sql = sql.replace("user", "\"user\"").replace(prefix + "by_\"user\"", prefix + "by_user");
            try (PreparedStatement p = c.prepareStatement(sql)) {
                for (int i = 0; i < 7; i++) {
                    for (String who : new String[]{"ann", "bob", "nobody"}) {
                        p.setString(1, who);
                        try (ResultSet r = p.executeQuery()) {
                            ResultSetMetaData m = r.getMetaData();
                            if (i == 6 && who.equals("ann")) {
                                for (int k = 1; k <= m.getColumnCount(); k++)
                                    System.out.println("rsmeta\t" + m.getColumnName(k) + "\t"
                                        + m.getColumnTypeName(k) + "\t" + m.getColumnType(k));
                            }
                            while (r.next()) {
                                if (i != 6) continue;
                                System.out.println("row\t" + who + "\t" + r.getLong(1) + "\t"
                                    + r.getString(2) + "\t" + cell(r.getObject(3)) + "\t" + cell(r.getObject(4)));
                            }
                        }
                    }
                }
            }
            try (Statement s = c.createStatement();
                 ResultSet r = s.executeQuery("SHOW partialflow.lsn")) {
                if (r.next()) System.out.println("lsn\t" + r.getString(1));
            } catch (SQLException e) {
                System.out.println("lsn\tNONE");
            }
        }
    }
}
